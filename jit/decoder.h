// Decodes every instruction of a function with Zydis (linear sweep over the
// function's bytes; functions come bounded by symbols or FDEs). A byte that
// does not decode means data in code or a wrong bound: the function is
// rejected (I5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "jit/instruction.h"

namespace dyni::jit {

// Decodes `bytes`, which run at address `addr`.
Result<std::vector<Instruction>> decode_function(std::span<const uint8_t> bytes, uint64_t addr);

// Decodes a single instruction (for tests and the verifier).
Result<Instruction> decode_one(std::span<const uint8_t> bytes, uint64_t addr);

// Whether `in` may write general-purpose register `r` (any width of it), its
// hidden operands included (mul writes rdx, a call's callee any caller-saved
// register, rep movs rcx/rsi/rdi). True when in doubt.
bool may_write_gpr(const Instruction& in, ZydisRegister r);

// `in`, a load `op reg, [base + index*scale + disp]`, encoded again with
// displacement `disp` (the encoder picks the shortest form: pass a value
// that needs 32 bits to know the length). Fails for any other form.
Result<std::vector<uint8_t>> with_displacement(const Instruction& in, int32_t disp);

}  // namespace dyni::jit
