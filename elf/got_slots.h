// The GOT slots a module's dynamic relocations fill with a symbol's address:
// JUMP_SLOT (its PLT's) and GLOB_DAT (calls through the GOT, -fno-plt, and
// address-of), named from .dynsym, with the symbol's link-time address where
// the module defines it. Read from the file alone: a slot is named whether or
// not ld.so has bound it yet (lazy binding). Untrusted input (I9): every
// index and offset is bounds-checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace dyni::elf {

struct GotSlot {
  uint64_t slot = 0;     // link-time address of the slot
  std::string name;      // the symbol it binds, without a version
  uint64_t defined = 0;  // the symbol's link-time address in this module, 0: another module's
  bool jump_slot = false;  // R_X86_64_JUMP_SLOT (else GLOB_DAT)
};

// Every JUMP_SLOT and GLOB_DAT relocation of the relocation sections tied
// to .dynsym; none for a file without .dynsym (static).
Result<std::vector<GotSlot>> got_slots(const ElfFile& file);

}  // namespace dyni::elf
