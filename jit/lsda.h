// A copy's LSDA: the original's exception table (.gcc_except_table, the
// format GCC's and Clang's C++ personality reads) re-addressed for the copy.
//
// The call-site table maps code ranges, as offsets from the FDE's start, to
// landing pads and actions. A PC that throws and matches no call site makes
// the C++ runtime call std::terminate, so the copy needs a table of its own:
// each run of copied instructions that lies in one original call site gets
// a call site at the copy's offsets, with the same action. Landing pads stay
// in the original code (the copy keeps the original's frame at every
// instruction, I6): LPStart is written absolute, just below the original
// function and its pads (never 0, which older libc++abi reads as "the
// function's start"), and each pad as its offset from there. The action
// table and the exception-specification table hold no addresses and are
// copied as they are; the type table covers every index either uses.
// Type-table entries are addresses (often pc-relative): each is decoded at
// its original place and written absolute (keeping the indirect bit), so
// the table reads the same anywhere. The tables are untrusted (I9): sizes,
// chains (no cycles), sorting and counts are checked and bounded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "jit/emitter.h"

namespace dyni::jit {

struct LsdaSource {
  std::span<const uint8_t> bytes;  // from the LSDA's first byte to the end of its section
  uint64_t addr = 0;               // link-time address of the LSDA
  uint64_t region_start = 0;       // the original FDE's first address: call sites count from it
  uint64_t bias = 0;               // run-time address minus link-time address of the module
};

// The LSDA for `copy` (its translation table gives each cache instruction's
// original; `copy.base` and the copy's addresses are link-time numbers, like
// the module's, and get `bias` added). Fails on encodings it does not know,
// rather than guess (the function is then not dynimized).
Result<std::vector<uint8_t>> translate_lsda(const LsdaSource& source, const EmittedCode& copy);

// The original's landing pads (link-time addresses), where the unwinder
// resumes a frame of the original or of its copy (the copy's pads are the
// original's). Fails on what parse refuses.
Result<std::vector<uint64_t>> landing_pads(const LsdaSource& source);

}  // namespace dyni::jit
