// The target of an indirect call or jmp, loaded into a register by code
// placed just before it (value code, counting.h; promoted calls,
// promotion.h): the same operand, read from the same address with the same
// size, so that the load faults only where the call would. Pure.
#pragma once

#include <Zydis/Zydis.h>

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "jit/instruction.h"

namespace dyni::jit {

// Whether the target of `in`, an indirect call or jmp, can be loaded so: a
// 64-bit register other than rsp, or a 64-bit memory operand (base and
// index 64-bit registers, or rip alone); no prefix but REX (a segment or
// address-size override would change what the load reads).
bool target_loadable(const Instruction& in);

// mov `to`, the operand of `call`, encoded at `at`, where rsp is `shift`
// bytes below what it is at the call: an rsp-based displacement grows by
// it, a rip-based one is re-aimed at the same address. Its length does not
// depend on `at`.
Result<std::vector<uint8_t>> load_target(const Instruction& call, uint64_t at, ZydisRegister to, unsigned shift);

// Whether `load` is such a load of `call`'s target into `to`.
bool loads_target_of(const Instruction& load, const Instruction& call, ZydisRegister to, unsigned shift);

}  // namespace dyni::jit
