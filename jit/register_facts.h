// What is known of each general-purpose register before each instruction of
// a function: a small forward dataflow over its CFG, for the proofs that let
// a jump table be rebuilt (cfg.cpp): the table's base is one address on
// every path, and its index is bounded.
//
// Per register it keeps:
//  - max:      an unsigned upper bound of its 64-bit value (a 32-bit write
//              zero-extends; `and` with a constant, movzx, a compare guard),
//              and of its low 8, 16 and 32 bits (a guard on ecx bounds the
//              later copy mov eax, ecx even when rcx's high half is unknown);
//  - constant: its value when every path gives the same one (lea [rip+x],
//              mov imm), in the module's link-time numbering;
//  - value/bits: a symbolic name: the register holds the low `bits` bits of
//              the value named `value`, zero-extended. Registers with the
//              same name hold the same value, so a guard on one (cmp r14b;
//              ja) bounds its copies (movzx r8d, r14b; mov eax, r8d).
// A name is an instruction and the register it wrote, or a join's (phi: a
// block's start, a register): "the value this instruction produced the
// last time it ran". When an instruction runs again, every register still
// holding one of its old names loses the name (not the bound).
//
// Soundness rests on three things, each written where it is used:
//  - the copy of a function is entered only at its start (the entry patch,
//    calls and tail calls from other copies); branches that leave the copy
//    go to the original code, which never branches back into a copy, and
//    landing pads stay in the original code (lsda.h). So the paths the copy
//    can run are paths of this CFG from its start, whatever other code does,
//    and a block no such path reaches never runs in the copy;
//  - a call leaves the callee-saved registers as they were (SysV ABI, which
//    every compiled function keeps; decoder.h, register_use);
//  - the CFG holds every edge of the copy: direct branches, fall-throughs,
//    and the targets of every resolved table (over-approximated: an
//    unrebuilt table's jump leaves for the original code in the copy).
// A function whose facts do not settle within a bounded number of rounds
// gets no facts at all (every register unknown): nothing is proven there.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "jit/cfg.h"
#include "jit/decoder.h"

namespace dyni::jit {

struct RegisterFact {
  uint64_t max = UINT64_MAX;
  std::array<uint64_t, 3> low_max{UINT64_MAX, UINT64_MAX, UINT64_MAX};  // of its low 8, 16, 32 bits
  std::optional<uint64_t> constant;
  bool address = false;  // the constant is a module address (lea [rip+x]): it moves with the load bias
  bool pointer = false;  // loaded whole from an unindexed slot ([reg+disp], [rip+x]): a function pointer
  uint32_t value = 0;  // 0: no name (relates to nothing)
  uint8_t bits = 64;

  // An upper bound of the register's low `bits` bits (8, 16, 32 or 64).
  uint64_t max_of_low(unsigned bits) const;

  bool operator==(const RegisterFact&) const = default;
};

// A memory operand by the registers that form its address:
// [base + index*scale + disp], `size` bits (base kRip: disp is the
// absolute address). It names the same memory for as long as neither
// register is written.
struct MemoryRef {
  static constexpr int8_t kNone = -1, kRip = -2;
  int8_t base = kNone, index = kNone;
  uint8_t scale = 0;
  int64_t disp = 0;
  uint16_t size = 0;

  bool operator==(const MemoryRef&) const = default;
};

// What the status flags hold: `cmp R, imm` of register `reg`'s low `width`
// bits, or `cmp [memory], imm`, for as long as R (or the address's
// registers) is not written: a jcc may test them blocks later.
struct CompareFact {
  int8_t reg = -1;
  uint8_t width = 0;
  uint64_t imm = 0;
  std::optional<MemoryRef> memory;

  bool operator==(const CompareFact&) const = default;
};

// A bound on what a memory operand holds, from a guard on a compare of it
// (`cmp word [r14], 4; ja default; movzx eax, word [r14]`), kept until
// anything may write memory or the address's registers. Another thread's
// store in between would be a data race, which the compiler that reloaded
// the operand assumed away too.
struct MemoryBound {
  MemoryRef ref;
  uint64_t max = 0;

  bool operator==(const MemoryBound&) const = default;
};

struct RegisterState {
  std::array<RegisterFact, 16> regs;  // rax ... r15, Zydis's order
  std::optional<CompareFact> flags;
  std::optional<MemoryBound> memory;

  RegisterFact& operator[](std::size_t r) { return regs[r]; }
  const RegisterFact& operator[](std::size_t r) const { return regs[r]; }
  bool operator==(const RegisterState&) const = default;
};

// The index of a general-purpose register (any width but ah, bh, ch, dh,
// which are not its low bits) in a RegisterState; -1 for any other.
int gpr_index(ZydisRegister r);

class RegisterFacts {
 public:
  // `cfg` must have its blocks and successors; it must outlive the facts.
  explicit RegisterFacts(const FunctionCfg& cfg);

  // What holds just before instruction `i` (an index into cfg.instructions).
  RegisterState before(std::size_t i) const;
  // False when the dataflow did not settle: every state is then unknown.
  bool settled() const { return settled_; }

 private:
  struct Guard;  // a compare the block's last jcc tests (register_facts.cpp)

  void solve();
  RegisterState entry_state(std::size_t block) const;
  static uint32_t def_name(std::size_t i, std::size_t reg);
  uint32_t phi(std::size_t block, std::size_t reg) const;
  bool is_phi_of(std::size_t block, uint32_t value) const;
  RegisterFact produced(std::size_t i, const RegisterState& s) const;
  uint64_t bound_in_memory(const Instruction& in, const Operand& op, const RegisterState& s) const;
  void step(std::size_t i, RegisterState& s) const;
  std::optional<Guard> guard_of(const Block& b, const RegisterState& end) const;
  RegisterState out_along(std::size_t from, uint64_t to) const;
  bool join_into(std::size_t block, const RegisterState& incoming);

  const FunctionCfg& cfg_;
  std::vector<std::optional<RegisterState>> in_;  // per block; empty: not reached yet
  std::vector<RegisterUse> uses_;                 // per instruction
  bool settled_ = true;
};

}  // namespace dyni::jit
