// The cache's symbol file for gdb (gdb_symbols.h), written with <elf.h>'s
// structures: five sections and their names, nothing to relocate.
#include "dynid/gdb_symbols.h"

#include <elf.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/file_io.h"
#include "common/paths.h"
#include "common/log.h"
#include "dynid/process_files.h"
#include "dynid/line_reader.h"

namespace dyni {
namespace {

constexpr std::size_t kMaxSymbolFiles = 64;  // two a process (counting, optimized)

void append(std::string& out, const void* data, std::size_t n) { out.append(static_cast<const char*>(data), n); }

void align(std::string& out, std::size_t to) { out.resize((out.size() + to - 1) / to * to, '\0'); }

// Strings of a string table; offset 0 is the empty name.
class StringTable {
 public:
  uint32_t add(const std::string& s) {
    const auto at = static_cast<uint32_t>(bytes_.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    bytes_.push_back(0);
    return at;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_{0};
};

// The copies' source lines, where the module's debug info can be read
// (source_lines.h); none otherwise (gdb then names the copies only).
DebugSections copies_dwarf(const Injection& in, const std::string& tier) {
  if (tier != "optimized") return {};  // the counting copies are short-lived, and run while this would be read
  bool any = std::any_of(in.copies.begin(), in.copies.end(), [](const CopyRange& c) { return !c.lines.empty(); });
  if (!any || in.module.empty()) return {};
  std::vector<uint64_t> addrs;  // link-time, every copied instruction's
  for (const CopyRange& c : in.copies)
    for (const auto& [offset, original] : c.lines) addrs.push_back(original - in.module_bias);
  auto lines = read_source_lines(in.module, in.build_id, addrs);
  if (!lines) {
    log::debug("pid {}: gdb's symbol file has no lines: {}", in.pid, lines.error().message());
    return {};
  }
  std::vector<CopyLines> out;
  std::size_t next = 0;
  for (const CopyRange& c : in.copies) {
    CopyLines copy{c.cache_addr, c.cache_addr + c.size, c.name + " [dyni]", {}};
    for (const auto& [offset, original] : c.lines)
      if (std::optional<SourceLine>& at = (*lines)[next++])
        copy.rows.push_back({c.cache_addr + offset, std::move(at->file), at->line});
    out.push_back(std::move(copy));
  }
  return dwarf_for_copies(out);
}

}  // namespace

std::vector<uint8_t> cache_symbol_file(const std::vector<CopyRange>& copies, uint64_t code_addr, uint64_t code_size,
                                       uint64_t eh_frame_addr, std::span<const uint8_t> eh_frame,
                                       const DebugSections& debug) {
  // The DWARF sections last: left out when there are no lines.
  enum Index : uint16_t { kNull, kText, kEhFrame, kSymtab, kStrtab, kShstrtab, kDebugAbbrev, kDebugInfo, kDebugLine, kCount };
  const uint16_t count = debug.info.empty() ? kDebugAbbrev : kCount;
  StringTable names, strings;
  std::vector<Elf64_Shdr> sections(kCount);
  sections[kText] = {names.add(".text"), SHT_NOBITS, SHF_ALLOC | SHF_EXECINSTR, code_addr, 0, code_size, 0, 0, 64, 0};
  sections[kEhFrame] = {names.add(".eh_frame"), SHT_PROGBITS, SHF_ALLOC, eh_frame_addr, 0, eh_frame.size(), 0, 0, 8, 0};
  sections[kSymtab] = {names.add(".symtab"), SHT_SYMTAB, 0, 0, 0, 0, kStrtab, 1, 8, sizeof(Elf64_Sym)};
  sections[kStrtab] = {names.add(".strtab"), SHT_STRTAB, 0, 0, 0, 0, 0, 0, 1, 0};
  sections[kShstrtab] = {names.add(".shstrtab"), SHT_STRTAB, 0, 0, 0, 0, 0, 0, 1, 0};
  if (count == kCount) {
    sections[kDebugAbbrev] = {names.add(".debug_abbrev"), SHT_PROGBITS, 0, 0, 0, 0, 0, 0, 1, 0};
    sections[kDebugInfo] = {names.add(".debug_info"), SHT_PROGBITS, 0, 0, 0, 0, 0, 0, 1, 0};
    sections[kDebugLine] = {names.add(".debug_line"), SHT_PROGBITS, 0, 0, 0, 0, 0, 0, 1, 0};
  }

  std::vector<Elf64_Sym> symbols(1);  // the null symbol; the rest are global (sh_info = 1)
  for (const CopyRange& c : copies)
    symbols.push_back({strings.add(c.name + " [dyni]"), ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), STV_DEFAULT, kText,
                       c.cache_addr, c.size});

  std::string out(sizeof(Elf64_Ehdr), '\0');
  auto place = [&](Index i, const void* data, std::size_t n, std::size_t alignment) {
    align(out, alignment);
    sections[i].sh_offset = out.size();
    sections[i].sh_size = n;
    append(out, data, n);
  };
  place(kEhFrame, eh_frame.data(), eh_frame.size(), 8);
  place(kSymtab, symbols.data(), symbols.size() * sizeof(Elf64_Sym), 8);
  place(kStrtab, strings.bytes().data(), strings.bytes().size(), 1);
  if (count == kCount) {
    place(kDebugAbbrev, debug.abbrev.data(), debug.abbrev.size(), 1);
    place(kDebugInfo, debug.info.data(), debug.info.size(), 1);
    place(kDebugLine, debug.line.data(), debug.line.size(), 1);
  }
  place(kShstrtab, names.bytes().data(), names.bytes().size(), 1);
  align(out, 8);
  const uint64_t section_headers = out.size();
  append(out, sections.data(), count * sizeof(Elf64_Shdr));

  Elf64_Ehdr h{};
  std::memcpy(h.e_ident, ELFMAG, SELFMAG);
  h.e_ident[EI_CLASS] = ELFCLASS64, h.e_ident[EI_DATA] = ELFDATA2LSB, h.e_ident[EI_VERSION] = EV_CURRENT;
  h.e_ident[EI_OSABI] = ELFOSABI_SYSV;
  h.e_type = ET_EXEC, h.e_machine = EM_X86_64, h.e_version = EV_CURRENT;
  h.e_shoff = section_headers, h.e_ehsize = sizeof(Elf64_Ehdr), h.e_shentsize = sizeof(Elf64_Shdr);
  h.e_shnum = count, h.e_shstrndx = kShstrtab;
  out.replace(0, sizeof h, reinterpret_cast<const char*>(&h), sizeof h);
  return std::vector<uint8_t>(out.begin(), out.end());
}

std::string cache_symbol_file_path(pid_t pid, uint64_t start_time, const std::string& tier,
                                   const std::string& module_tag) {
  return fmt::format("{}/gdb/{}-{}{}.elf", paths::state_dir(), process_file_stem(pid, start_time), tier, module_tag);
}

Result<std::string> save_cache_symbol_file(const Injection& in, const std::string& tier, const std::string& module_tag) {
  const std::string dir = paths::state_dir() + "/gdb";
  if (auto made = ensure_dir_p(dir, 0700); !made) return std::unexpected(made.error());
  const std::string path = cache_symbol_file_path(in.pid, in.start_time, tier, module_tag);
  std::vector<uint8_t> elf =
      cache_symbol_file(in.copies, in.code_addr, in.code_size, in.eh_frame_addr, in.eh_frame, copies_dwarf(in, tier));
  if (auto written = write_file_atomic(path, std::string(elf.begin(), elf.end()), 0600); !written)
    return std::unexpected(written.error());
  if (prune_due(dir)) prune_process_files(dir, kMaxSymbolFiles);
  return "add-symbol-file " + path;
}

}  // namespace dyni
