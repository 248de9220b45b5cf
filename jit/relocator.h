// Relocating one instruction: the same operation placed at another address,
// with every PC-relative operand re-aimed at the same absolute address (or at
// `new_target` for branches the layout retargets). A pure function of
// (instruction, new address); what it cannot express it refuses, with a reason.
//
//   no PC-relative operand      copied byte for byte
//   [rip + disp32]              disp32 rewritten in place (error beyond ±2 GB)
//   call/jmp/jcc rel32, xbegin  rel32 rewritten in place
//   jmp/jcc rel8                widened: jmp rel32 (E9), jcc rel32 (0F 8x)
//   jrcxz/jecxz/loop* rel8      expanded: op +2; jmp short +5; jmp rel32 target
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/result.h"
#include "jit/instruction.h"

namespace dyni::jit {

// Whether relocate() knows `in`'s encoding (rel16 branches, for one, it does
// not): checked during analysis, so emission fails only on distance.
Status check_relocatable(const Instruction& in);

// jrcxz/jecxz/loop*: branches with only a rel8 form, which relocate() expands
// into three instructions ending in the jmp rel32 that carries the target.
bool is_rel8_only(const Instruction& in);

// The length relocate() will produce for `in` (known before addresses are).
std::size_t relocated_length(const Instruction& in);

Result<std::vector<uint8_t>> relocate(const Instruction& in, uint64_t new_addr,
                                      std::optional<uint64_t> new_target = std::nullopt);

}  // namespace dyni::jit
