// Which status flags (CF PF AF ZF SF OF) a function may still read at each
// instruction: backward liveness over its CFG. Counter code (counting.h)
// that changes flags may only go where the flags it changes are dead.
//
// Where control leaves, the SysV ABI decides, as register_use does for the
// callee-saved registers (decoder.h): the flags have no role in the calling
// sequence, so a call clobbers them all and reads none, and they are dead at
// a ret. Every other way out (a jump or jcc to outside the function, a fall
// past its end, an indirect jump that no table resolves) may reach code that
// reads them (a .cold part continues its function's flags): all live there.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/cfg.h"

namespace dyni::jit {

// Per instruction of `cfg` (same index): the status flags live before it.
std::vector<uint16_t> live_flags_before(const FunctionCfg& cfg);

// The flags live when control goes on from instruction `i` to its next
// instruction (the fall-through of a jcc, the instruction after a call):
// the live-in of what follows, or all where that is outside the function.
uint16_t live_flags_at_next(const FunctionCfg& cfg, const std::vector<uint16_t>& before, std::size_t i);

}  // namespace dyni::jit
