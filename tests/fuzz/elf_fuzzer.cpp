// Fuzz target: everything dynid parses from a target's ELF file (I9).
// Input: the bytes of a file claiming to be an ELF executable.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "elf/cfi.h"
#include "elf/eh_frame.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "elf/usdt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace dyni::elf;
  // The raw bytes as an .eh_frame section, too: its parser and the CFI
  // interpreter see them directly.
  std::span<const uint8_t> raw(data, size);
  if (auto fdes = parse_eh_frame(raw, 0x400000)) {
    for (const Fde& fde : *fdes) {
      auto rows = cfi_rows(raw, fde);
      if (rows && (rows->empty() || rows->front().addr != fde.begin)) __builtin_trap();
      if (rows && rows->back().addr > fde.end) __builtin_trap();  // rows stay inside the FDE
    }
  }
  auto file = ElfFile::from_bytes(std::vector<uint8_t>(data, data + size));
  if (!file) return 0;
  (void)file->build_id();
  (void)usdt_probes(*file);
  auto table = FunctionTable::build(*file, &*file);
  if (!table) return 0;
  for (const auto& f : table->functions()) {
    if (table->find(f.addr) == nullptr) __builtin_trap();  // every function must be findable
    (void)display_name(f);
  }
  return 0;
}
