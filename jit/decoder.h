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

// The general-purpose registers an instruction reads and writes, as masks
// with bit k for the k-th 64-bit register (rax = 0 ... r15 = 15, Zydis's
// order), hidden operands and address registers included, and whether it
// writes any status flag. A call follows the SysV ABI: it reads the
// argument registers and rsp and writes the caller-saved registers; the
// callee-saved ones (rbx, rbp, r12-r15) come back as they were, which every
// compiled function guarantees. An interrupt, syscall or system instruction
// reads and writes them all.
struct RegisterUse {
  uint16_t read = 0, written = 0;
  bool writes_flags = false;
  bool writes_memory = false;  // a store, push, call, string op, or anything not known
};
RegisterUse register_use(const Instruction& in);

// The bit of `r` (any width of it) in RegisterUse's masks; 0 for a register
// that is not a general-purpose one.
uint16_t gpr_bit(ZydisRegister r);

constexpr uint16_t kCalleeSaved = (1u << 3) | (1u << 5) | (0xfu << 12);  // rbx rbp r12-r15
constexpr uint16_t kArguments = (1u << 7) | (1u << 6) | (1u << 2) | (1u << 1) | (1u << 8) | (1u << 9);  // rdi rsi rdx rcx r8 r9

// `in`, an instruction with one memory operand `[base + index*scale + disp]`
// (base may be absent, never rip), encoded again with displacement `disp`
// (the encoder picks the shortest form: pass a value that needs 32 bits to
// know the length). Fails for any other form.
Result<std::vector<uint8_t>> with_displacement(const Instruction& in, int32_t disp);

}  // namespace dyni::jit
