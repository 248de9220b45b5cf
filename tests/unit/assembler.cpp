// LLVM MC set up as an in-memory assembler producing an ELF object.
#include "tests/unit/assembler.h"

#include <llvm/MC/MCAsmBackend.h>
#include <llvm/MC/MCAsmInfo.h>
#include <llvm/MC/MCCodeEmitter.h>
#include <llvm/MC/MCContext.h>
#include <llvm/MC/MCInstrInfo.h>
#include <llvm/MC/MCObjectFileInfo.h>
#include <llvm/MC/MCObjectWriter.h>
#include <llvm/MC/MCParser/MCAsmParser.h>
#include <llvm/MC/MCParser/MCTargetAsmParser.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/MC/MCStreamer.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/MCTargetOptions.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <elf.h>

#include <cstring>
#include <span>

namespace dyni::test {
namespace {

// The .text of the relocatable object LLVM wrote (trusted: we just made it).
Result<Assembly> text_of(std::span<const uint8_t> object) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, object.data(), sizeof eh);
  auto section = [&](unsigned i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, object.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    return sh;
  };
  Elf64_Shdr names = section(eh.e_shstrndx);
  Assembly out;
  bool found = false;
  unsigned text_index = 0;
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    std::string name(reinterpret_cast<const char*>(object.data() + names.sh_offset + sh.sh_name));
    if (name == ".rela.text" && sh.sh_size > 0) return fail("the text needs relocations (references outside .text)");
    if (name == ".text") {
      out.bytes.assign(object.begin() + sh.sh_offset, object.begin() + sh.sh_offset + sh.sh_size);
      found = true;
      text_index = i;
    }
  }
  if (!found) return fail("no .text assembled");
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_SYMTAB) continue;
    Elf64_Shdr strings = section(sh.sh_link);
    for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, object.data() + sh.sh_offset + off, sizeof sym);
      if (sym.st_shndx != text_index || sym.st_name == 0) continue;
      out.labels[reinterpret_cast<const char*>(object.data() + strings.sh_offset + sym.st_name)] = sym.st_value;
    }
  }
  return out;
}

}  // namespace

Result<Assembly> assemble_with_labels(const std::string& intel_text) {
  static const bool initialised = [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmParser();
    return true;
  }();
  (void)initialised;
  const std::string triple_name = "x86_64-pc-linux-gnu";
  llvm::Triple triple(triple_name);
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple_name, error);
  if (!target) return fail("llvm: " + error);
  llvm::MCTargetOptions options;
  std::unique_ptr<llvm::MCRegisterInfo> regs(target->createMCRegInfo(triple_name));
  std::unique_ptr<llvm::MCAsmInfo> asm_info(target->createMCAsmInfo(*regs, triple_name, options));
  std::unique_ptr<llvm::MCInstrInfo> instrs(target->createMCInstrInfo());
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple_name, "", ""));
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(".intel_syntax noprefix\n" + intel_text + "\n"),
                             llvm::SMLoc());
  std::string diagnostics;
  llvm::raw_string_ostream diag_stream(diagnostics);
  sources.setDiagHandler([](const llvm::SMDiagnostic& d, void* out) {
    d.print("asm", *static_cast<llvm::raw_string_ostream*>(out), false);
  }, &diag_stream);
  llvm::MCContext ctx(triple, asm_info.get(), regs.get(), sti.get(), &sources);
  std::unique_ptr<llvm::MCObjectFileInfo> ofi(target->createMCObjectFileInfo(ctx, /*PIC=*/true));
  ctx.setObjectFileInfo(ofi.get());
  llvm::SmallVector<char, 4096> object;
  llvm::raw_svector_ostream object_stream(object);
  std::unique_ptr<llvm::MCAsmBackend> backend(target->createMCAsmBackend(*sti, *regs, options));
  auto writer = backend->createObjectWriter(object_stream);
  std::unique_ptr<llvm::MCStreamer> streamer(target->createMCObjectStreamer(
      triple, ctx, std::move(backend), std::move(writer),
      std::unique_ptr<llvm::MCCodeEmitter>(target->createMCCodeEmitter(*instrs, ctx)), *sti, false, false, false));
  std::unique_ptr<llvm::MCAsmParser> parser(llvm::createMCAsmParser(sources, ctx, *streamer, *asm_info));
  std::unique_ptr<llvm::MCTargetAsmParser> target_parser(target->createMCAsmParser(*sti, *parser, *instrs, options));
  parser->setTargetParser(*target_parser);
  if (parser->Run(false)) return fail("assembly failed: " + diag_stream.str());
  return text_of(std::span(reinterpret_cast<const uint8_t*>(object.data()), object.size()));
}

}  // namespace dyni::test
