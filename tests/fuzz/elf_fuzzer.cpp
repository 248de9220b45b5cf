// Fuzz target: everything dynid parses from a target's ELF file (I9).
// Input: the bytes of a file claiming to be an ELF executable.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "elf/eh_frame.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace dyni::elf;
  // The raw bytes as an .eh_frame section, too: its parser sees them directly.
  (void)parse_eh_frame(std::span<const uint8_t>(data, size), 0x400000);
  auto file = ElfFile::from_bytes(std::vector<uint8_t>(data, data + size));
  if (!file) return 0;
  (void)file->build_id();
  auto table = FunctionTable::build(*file, &*file);
  if (!table) return 0;
  for (const auto& f : table->functions()) {
    if (table->find(f.addr) == nullptr) __builtin_trap();  // every function must be findable
    (void)display_name(f);
  }
  return 0;
}
