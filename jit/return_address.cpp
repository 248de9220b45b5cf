// Stack-depth dataflow from a function's entry to find uses of its return
// address slot, and the memoised module-wide answer with tail calls.
#include "jit/return_address.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

namespace dyni::jit {
namespace {

// Where the return address is, as seen at one instruction.
struct Frame {
  std::optional<int64_t> depth;  // the slot is [rsp + depth]
  std::optional<int64_t> rbp;    // the slot is [rbp + rbp]
  bool operator==(const Frame&) const = default;
};

Frame merge(const Frame& a, const Frame& b) {
  return {a.depth == b.depth ? a.depth : std::nullopt, a.rbp == b.rbp ? a.rbp : std::nullopt};
}

ZydisRegister widest(ZydisRegister r) { return ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r); }

bool writes(const Instruction& in, ZydisRegister r) {
  return in.operand_count >= 1 && in.ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER && widest(in.ops[0].reg) == r &&
         (in.ops[0].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE);
}

bool is_reg(const Operand& op, ZydisRegister r) {
  return op.type == ZYDIS_OPERAND_TYPE_REGISTER && op.reg == r;
}

// The bytes a push or pop moves rsp by (0x66: a 16-bit push).
int64_t stack_slot(const Instruction& in) {
  for (unsigned i = 0; i < in.prefix_count; ++i)
    if (in.bytes[i] == 0x66) return 2;
  return 8;
}

// Whether memory operand `op` of `in` (evaluated before `in` runs) is the slot.
bool is_slot(const Operand& op, const Frame& f) {
  if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.index != ZYDIS_REGISTER_NONE) return false;
  if (op.base == ZYDIS_REGISTER_RSP) return f.depth && op.disp == *f.depth;
  if (op.base == ZYDIS_REGISTER_RBP) return f.rbp && op.disp == *f.rbp;
  return false;
}

bool uses_slot(const Instruction& in, const Frame& f) {
  bool pops_it = (in.mnemonic == ZYDIS_MNEMONIC_POP || in.mnemonic == ZYDIS_MNEMONIC_POPFQ) && f.depth == 0;
  return pops_it || is_slot(in.ops[0], f) || is_slot(in.ops[1], f);
}

std::optional<int64_t> shifted(std::optional<int64_t> depth, int64_t by) {
  return depth ? std::optional(*depth + by) : std::nullopt;
}

// The frame after push, pop or leave; none for other instructions.
std::optional<Frame> after_stack_op(const Instruction& in, Frame f) {
  switch (in.mnemonic) {
    case ZYDIS_MNEMONIC_PUSH:
    case ZYDIS_MNEMONIC_PUSHFQ: return Frame{shifted(f.depth, stack_slot(in)), f.rbp};
    case ZYDIS_MNEMONIC_POP:
    case ZYDIS_MNEMONIC_POPFQ:
      f.depth = writes(in, ZYDIS_REGISTER_RSP) ? std::nullopt : shifted(f.depth, -stack_slot(in));
      if (writes(in, ZYDIS_REGISTER_RBP)) f.rbp.reset();
      return f;
    case ZYDIS_MNEMONIC_LEAVE:  // mov rsp, rbp; pop rbp
      return Frame{shifted(f.rbp, -8), std::nullopt};
    default: return std::nullopt;
  }
}

// The frame after sub/add rsp, imm; lea rsp, [rsp + d]; mov rbp, rsp;
// mov rsp, rbp; none for other instructions.
std::optional<Frame> after_frame_setup(const Instruction& in, Frame f) {
  const Operand& a = in.ops[0];
  const Operand& b = in.ops[1];
  bool add_sub = in.mnemonic == ZYDIS_MNEMONIC_SUB || in.mnemonic == ZYDIS_MNEMONIC_ADD;
  if (add_sub && is_reg(a, ZYDIS_REGISTER_RSP) && b.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
    int64_t imm = static_cast<int64_t>(b.imm);
    return Frame{shifted(f.depth, in.mnemonic == ZYDIS_MNEMONIC_SUB ? imm : -imm), f.rbp};
  }
  bool lea_rsp = in.mnemonic == ZYDIS_MNEMONIC_LEA && is_reg(a, ZYDIS_REGISTER_RSP) &&
                 b.base == ZYDIS_REGISTER_RSP && b.index == ZYDIS_REGISTER_NONE;
  if (lea_rsp) return Frame{shifted(f.depth, -b.disp), f.rbp};
  if (in.mnemonic != ZYDIS_MNEMONIC_MOV) return std::nullopt;
  if (is_reg(a, ZYDIS_REGISTER_RBP) && is_reg(b, ZYDIS_REGISTER_RSP)) return Frame{f.depth, f.depth};
  if (is_reg(a, ZYDIS_REGISTER_RSP) && is_reg(b, ZYDIS_REGISTER_RBP)) return Frame{f.rbp, f.rbp};
  return std::nullopt;
}

// The frame after `in` (`in` does not use the slot): any other write to rsp
// or rbp loses what is known of it.
Frame step(const Instruction& in, Frame f) {
  if (auto g = after_stack_op(in, f)) return *g;
  if (auto g = after_frame_setup(in, f)) return *g;
  if (writes(in, ZYDIS_REGISTER_RSP)) f.depth.reset();
  if (writes(in, ZYDIS_REGISTER_RBP)) f.rbp.reset();
  return f;
}

}  // namespace

EntryFrame entry_frame(const elf::CfiState& at_entry) {
  constexpr uint32_t kRsp = 7, kRbp = 6, kReturnAddress = 16;
  const elf::RegisterRule& ra = at_entry.regs[kReturnAddress];
  int64_t slot = ra.kind == elf::RegisterRule::Kind::AtCfa ? ra.value : -8;  // from the CFA
  const elf::CfaRule& cfa = at_entry.cfa;
  if (cfa.expression || ra.kind == elf::RegisterRule::Kind::Expression) return {std::nullopt, std::nullopt};
  if (cfa.reg == kRsp) return {cfa.offset + slot, std::nullopt};
  if (cfa.reg == kRbp) return {std::nullopt, cfa.offset + slot};
  return {std::nullopt, std::nullopt};
}

bool uses_return_address(const FunctionCfg& cfg, const EntryFrame& entry) {
  std::vector<std::optional<Frame>> at(cfg.blocks.size());  // on entry to each block
  std::map<uint64_t, std::size_t> index;
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) index[cfg.blocks[b].start] = b;
  if (cfg.blocks.empty()) return false;
  at[0] = Frame{entry.depth, entry.rbp};
  std::vector<std::size_t> work = {0};
  while (!work.empty()) {
    std::size_t b = work.back();
    work.pop_back();
    Frame f = *at[b];
    const Block& block = cfg.blocks[b];
    for (std::size_t i = block.first; i < block.first + block.count; ++i) {
      if (uses_slot(cfg.instructions[i], f)) return true;
      f = step(cfg.instructions[i], f);
    }
    for (uint64_t s : block.successors) {
      std::size_t n = index.at(s);
      Frame merged = at[n] ? merge(*at[n], f) : f;
      if (at[n] == merged) continue;  // Invariant: a block's frame only loses facts, so this ends
      at[n] = merged;
      work.push_back(n);
    }
  }
  return false;
}

bool ReturnAddressUsers::uses(uint64_t function) {
  if (auto it = known_.find(function); it != known_.end()) return it->second == State::Yes;
  if (lookups_.stubs.count(function)) {
    known_[function] = State::Yes;
    return true;
  }
  known_[function] = State::Working;  // a tail-call cycle back here adds nothing
  bool used = false;
  if (auto own = lookups_.plt_functions.find(function); own != lookups_.plt_functions.end()) {
    used = uses(own->second);  // a stub of the module's own PLT: the function its slot names
  } else {
    Analysed analysed = analyse_(function);
    used = analysed.cfg && uses(analysed);
  }
  known_[function] = used ? State::Yes : State::No;
  return used;
}

bool ReturnAddressUsers::uses(const Analysed& function) {
  const FunctionCfg& cfg = *function.cfg;
  if (uses_return_address(cfg, function.entry)) return true;
  for (const Instruction& in : cfg.instructions) {
    bool tail_jump = (in.flow == Flow::Branch || in.flow == Flow::CondBranch) && in.has_target &&
                     (in.target < cfg.start || in.target >= cfg.end);
    if (tail_jump && uses(in.target)) return true;
    if (in.flow == Flow::Branch && !in.has_target && in.rip_relative && through_slot(in.rip_address)) return true;
  }
  return false;
}

Status check_callees(const FunctionCfg& cfg, ReturnAddressUsers& users) {
  for (const Instruction& in : cfg.instructions)
    if (in.flow == Flow::Call &&
        (in.has_target ? users.uses(in.target) : in.rip_relative && users.through_slot(in.rip_address)))
      return fail(fmt::format("calls a user of its return address at {:#x}", in.addr));
  return ok();
}

}  // namespace dyni::jit
