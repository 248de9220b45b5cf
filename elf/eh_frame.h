// .eh_frame: the call-frame records of a module. Yields each FDE's code range
// (function bounds for stripped code), LSDA, and where its CFI program and its
// CIE's initial program lie (decoded by elf/cfi.h).
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
  // From the CIE's 'P': the personality routine, or with `personality_indirect`
  // the address of a slot holding it (DW_EH_PE_indirect); 0 if none.
  uint64_t personality = 0;
  bool personality_indirect = false;
  bool signal_frame = false;  // 'S': the frame of a signal trampoline
  std::size_t offset = 0;   // of the FDE within .eh_frame
  std::size_t cie_offset = 0;
  // From the CIE, for the CFI programs:
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t return_register = 16;
  std::size_t cie_program = 0, cie_program_size = 0;  // CIE initial instructions (offsets in .eh_frame)
  std::size_t program = 0, program_size = 0;          // this FDE's instructions
};

// Parses `bytes`, the contents of .eh_frame loaded at `section_addr`.
// Malformed input is an error; a zero terminator ends the list early.
Result<std::vector<Fde>> parse_eh_frame(std::span<const uint8_t> bytes, uint64_t section_addr);

}  // namespace dyni::elf
