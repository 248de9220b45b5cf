// .eh_frame: the call-frame records of a module. For now it yields each FDE's
// code range (function bounds for stripped code) and LSDA; the CFI programs
// themselves are decoded where unwinding through the cache needs them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"

namespace dyni::elf {

struct Fde {
  uint64_t begin = 0;       // first code address covered
  uint64_t end = 0;         // one past the last
  uint64_t lsda = 0;        // language-specific data (exception tables), 0 if none
  std::size_t offset = 0;   // of the FDE within .eh_frame
  std::size_t cie_offset = 0;
};

// Parses `bytes`, the contents of .eh_frame loaded at `section_addr`.
// Malformed input is an error; a zero terminator ends the list early.
Result<std::vector<Fde>> parse_eh_frame(std::span<const uint8_t> bytes, uint64_t section_addr);

}  // namespace dyni::elf
