// One decoded x86-64 instruction of a function, with what the jit needs to
// know about it: how control leaves it and what it addresses PC-relatively.
#pragma once

#include <Zydis/Zydis.h>

#include <array>
#include <cstdint>

namespace dyni::jit {

// The arithmetic status flags of RFLAGS: CF, PF, AF, ZF, SF, OF.
constexpr uint16_t kStatusFlags = ZYDIS_CPUFLAG_CF | ZYDIS_CPUFLAG_PF | ZYDIS_CPUFLAG_AF | ZYDIS_CPUFLAG_ZF |
                                  ZYDIS_CPUFLAG_SF | ZYDIS_CPUFLAG_OF;

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

// The facts of one operand that analysis matches on (a compact copy of
// Zydis's operand: a function's instructions are kept while it is laid out).
struct Operand {
  ZydisOperandType type = ZYDIS_OPERAND_TYPE_UNUSED;
  ZydisRegister reg = ZYDIS_REGISTER_NONE;    // register operand
  ZydisRegister base = ZYDIS_REGISTER_NONE;   // memory operand: [base + index*scale + disp]
  ZydisRegister index = ZYDIS_REGISTER_NONE;
  uint8_t scale = 0;
  uint8_t actions = 0;                        // ZYDIS_OPERAND_ACTION_*
  uint16_t size = 0;                          // bits
  int64_t disp = 0;
  uint64_t imm = 0;                           // immediate operand
};

// Where a field sits in the encoding (offset in bytes, size in bits).
struct EncodingField {
  uint8_t offset = 0, size = 0;
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
  ZydisMnemonic mnemonic = ZYDIS_MNEMONIC_INVALID;
  uint8_t prefix_count = 0;
  uint8_t operand_count = 0;  // visible operands
  EncodingField disp, imm;    // displacement, first immediate
  std::array<Operand, 2> ops{};  // the first two visible operands
  // Status flags (CF PF AF ZF SF OF, as RFLAGS bits: kStatusFlags) it may
  // read, and those it writes on every execution (flags_liveness.h).
  uint16_t flags_read = 0, flags_written = 0;

  uint64_t end() const { return addr + length; }
  // The fs: or gs: override (0x64, 0x65) among its prefixes, or 0: such an
  // operand is in another address space.
  uint8_t segment_override() const {
    for (std::size_t k = 0; k < prefix_count && k < length; ++k)
      if (bytes[k] == 0x64 || bytes[k] == 0x65) return bytes[k];
    return 0;
  }
  // The first visible memory operand among the two kept, if any.
  const Operand* memory() const {
    for (std::size_t k = 0; k < operand_count && k < ops.size(); ++k)
      if (ops[k].type == ZYDIS_OPERAND_TYPE_MEMORY) return &ops[k];
    return nullptr;
  }
  bool ends_block() const { return flow != Flow::Next && flow != Flow::Call && flow != Flow::IndirectCall; }
  // Whether execution may go on at end() (a call's return included).
  bool falls_through() const { return !ends_block() || flow == Flow::CondBranch; }
};

}  // namespace dyni::jit
