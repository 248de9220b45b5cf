// Promoted calls (issue 20 item 1): an indirect call in an optimized copy
// whose counts (value sites, counting.h) show one dominant target becomes a
// guarded direct call to that target's copy, so that a virtual call reaches
// the copy without the hop through the original entry. Pure.
//
//   mov r11, <the call's operand>       the same load as the call's
//   cmp r11, [rip + literal]            the target, as the module loaded it
//   jne stub
//   call <the target's copy>            returns straight on: no taken branch
//   ...                                 on the way that the counts say
//   stub (after the function's code):   anything else: what the original calls
//   call r11
//   jmp <the image of the instruction after the call>
//
// The guard compares with the address the loaded pointer actually holds,
// so the copy runs only where the original would have run the function it
// is a copy of; any choice of target is correct, a wrong one only slower.
// The literal is an 8-byte absolute slot after the code, relocated by the
// load bias like a rebuilt table's entries (emitter.h).
//
// Invariants it rests on, both from the System V ABI, which an indirect
// call's caller must follow since it cannot know its callee:
//   - r11 is free at an indirect call: no argument is passed in it and the
//     callee may clobber it, so no caller keeps a value in it across the
//     call (an operand that uses r11 is read before r11 is written). A
//     call after which the function may read r11 before writing it (a
//     callee declared no_caller_saved_registers, hand-written code) is not
//     promoted; an argument in r11 (clang's preserve_none with more than 11
//     arguments, hand-written code) is not seen;
//   - the status flags are dead before a call (the verifier checks it again
//     with the liveness of flags_liveness.h).
// Both returns (after either call) map to the original call, as do every
// one of its instructions and its stub's (Translation::Promoted): unwind
// rows and the exception tables give them the call's frame and landing pad.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/result.h"
#include "jit/cfg.h"
#include "jit/counting.h"

namespace dyni::jit {

// A site is promoted when its most called target took at least this share
// of its calls, over at least kPromoteMinCalls calls.
constexpr double kPromoteShare = 0.6;
constexpr uint64_t kPromoteMinCalls = 16;

// The indirect calls of `cfg` to promote (call address → target), from its
// counts: sites whose dominant target is one of `copied` (functions with a
// copy in the cache, link-time addresses), whose call target_loadable, and
// after which r11 is not read before it is written.
std::map<uint64_t, uint64_t> promotions(const FunctionCfg& cfg, const SiteCounts& counts, const std::set<uint64_t>& copied);

constexpr std::size_t kPromotedInstructions = 4;  // in line; the stub has 2
constexpr std::size_t kStubLength = 8;            // call r11; jmp rel32

// The length of `call`'s promoted code in line (any address).
Result<std::size_t> promoted_length(const Instruction& call);

// Its instructions' offsets from its start.
std::vector<uint8_t> promoted_offsets(const Instruction& call);

// Its bytes at `at`: comparing with the literal at `literal`, calling `copy`,
// else going to its stub at `stub`.
Result<std::vector<uint8_t>> promoted_code(const Instruction& call, uint64_t at, uint64_t copy, uint64_t literal,
                                           uint64_t stub);

// The stub's bytes at `at`, going back to `back`; its second instruction
// starts kStubCallLength bytes in.
constexpr std::size_t kStubCallLength = 3;
Result<std::vector<uint8_t>> promoted_stub(uint64_t at, uint64_t back);

}  // namespace dyni::jit
