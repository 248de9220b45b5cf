// Unwind rows for cache code (I6, I7): every cache instruction stands for one
// original instruction and has that instruction's frame — the same CFA rule
// and saved registers — so the rows of a function's copy are the original
// rows, re-addressed through the translation table. An added jmp has the
// frame of the instruction it continues at; counter code the frame of the
// instruction it maps to, with rsp lower by what it pushed (a frame given by
// a DWARF expression cannot move: no rows then). Consecutive equal rows merge.
// (Registering them in the target, with LSDAs, is the injection's business.)
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "elf/cfi.h"
#include "jit/emitter.h"

namespace dyni::jit {

struct UnwindRow {
  uint64_t cache_addr = 0;     // in effect from here to the next row or the code's end
  uint64_t original_addr = 0;  // the instruction whose frame this is
  elf::CfiState state;
};

// The original address whose frame cache instruction `k` of `code` has: its
// own, except for the jmp a last jcc or call falls into past the function's
// end (`original_end`), which has the frame of that jcc or call (falling
// through changes no frame).
uint64_t frame_address(const EmittedCode& code, std::size_t k, uint64_t original_end);

// The frame cache instruction `k` of `code` has: that of frame_address(),
// with rsp lower by what counter code has pushed there (stack_shift).
Result<elf::CfiState> cache_frame(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                  const EmittedCode& code, std::size_t k);

// `original`: the function's rows (elf::cfi_rows), covering [first row, original_end).
Result<std::vector<UnwindRow>> cache_unwind_rows(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                                 const EmittedCode& code);

}  // namespace dyni::jit
