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
//   jmp/jcc, BranchWidth::Short jmp rel8 (EB), jcc rel8 (7x), prefixes dropped:
//                               the emitter's choice for a target within reach
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

// The encoding of a relocated jmp or jcc: rel32 (Near), or rel8 (Short)
// when the emitter knows its target's copy lies within reach.
enum class BranchWidth { Near, Short };

// A jmp or jcc (rel8 or rel32), which has a 2-byte rel8 form; not a call,
// xbegin, or a rel8-only branch.
bool can_be_short(const Instruction& in);

// The length relocate() will produce for `in` (known before addresses are).
std::size_t relocated_length(const Instruction& in, BranchWidth width = BranchWidth::Near);

// Whether a branch ending at `next` reaches `target` with a rel8.
constexpr bool fits_rel8(uint64_t next, uint64_t target) {
  int64_t delta = static_cast<int64_t>(target - next);
  return delta >= INT8_MIN && delta <= INT8_MAX;
}

// jmp rel8 (EB), or jcc rel8 (7x) with condition `cc`, at `at` to `target`;
// fails when the target is out of reach.
Result<std::vector<uint8_t>> short_branch(uint64_t at, uint64_t target, std::optional<unsigned> cc);

// Short needs can_be_short(in), and fails when the target is out of reach.
Result<std::vector<uint8_t>> relocate(const Instruction& in, uint64_t new_addr,
                                      std::optional<uint64_t> new_target = std::nullopt,
                                      BranchWidth width = BranchWidth::Near);

// The condition code (0..15) of a jcc, read at its opcode (7x rel8, 0f 8x
// rel32), or none for every other branch: jmp, xbegin, loop*, jrcxz have no
// opposite and are never inverted.
std::optional<unsigned> jcc_condition(const Instruction& in);

// jcc `in` at `new_addr` with the opposite condition, going to `new_target`.
// The condition is flipped in the opcode (the last 6 bytes of a jcc rel32 are
// 0f 8x rel32), never found by a byte pattern that a displacement may hold.
Result<std::vector<uint8_t>> relocate_inverted(const Instruction& in, uint64_t new_addr, uint64_t new_target,
                                               BranchWidth width = BranchWidth::Near);

}  // namespace dyni::jit
