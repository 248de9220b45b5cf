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

}  // namespace dyni::jit
