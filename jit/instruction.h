// One decoded x86-64 instruction of a function, with what the jit needs to
// know about it: how control leaves it and what it addresses PC-relatively.
#pragma once

#include <Zydis/Zydis.h>

#include <array>
#include <cstdint>

namespace dyni::jit {

// How control continues after an instruction.
enum class Flow : uint8_t {
  Next,            // falls through to the next instruction
  CondBranch,      // jcc / jrcxz / loop*: target or next
  Branch,          // jmp rel: target only
  IndirectBranch,  // jmp reg/mem: a jump table, or unknown
  Call,            // call rel: target, then next
  IndirectCall,    // call reg/mem: somewhere, then next
  Return,          // ret
  Stop,            // int3, ud2, hlt: no successor
};

struct Instruction {
  uint64_t addr = 0;
  uint8_t length = 0;
  std::array<uint8_t, ZYDIS_MAX_INSTRUCTION_LENGTH> bytes{};  // the original encoding
  Flow flow = Flow::Next;
  bool has_target = false;  // a direct branch or call
  uint64_t target = 0;
  bool rip_relative = false;  // has a [rip + disp] memory operand
  uint64_t rip_address = 0;   // the absolute address it refers to
  ZydisDecodedInstruction zy{};
  std::array<ZydisDecodedOperand, ZYDIS_MAX_OPERAND_COUNT> ops{};

  uint64_t end() const { return addr + length; }
  bool ends_block() const { return flow != Flow::Next && flow != Flow::Call && flow != Flow::IndirectCall; }
};

}  // namespace dyni::jit
