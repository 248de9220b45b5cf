// The register dataflow: transfer of one instruction, guards on edges, joins.
#include "jit/register_facts.h"

#include <algorithm>
#include <deque>

#include "jit/decoder.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kVisitsPerBlock = 64;  // beyond this the facts are given up

uint64_t mask_of(unsigned bits) { return bits >= 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1; }

// The slot of RegisterFact::low_max for `bits`, or -1 for 64.
int low_slot(unsigned bits) { return bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : -1; }

// `f` seen through its low `bits` bits, zero-extended (mov r32, r32; movzx).
RegisterFact narrowed(const RegisterFact& f, unsigned bits) {
  RegisterFact out = f;
  out.max = f.max_of_low(bits);
  for (unsigned w : {8u, 16u, 32u})
    if (w >= bits) out.low_max[low_slot(w)] = UINT64_MAX;  // out.max says it
  if (f.constant) out.constant = *f.constant & mask_of(bits);
  out.address = f.address && bits == 64;
  out.pointer = f.pointer && bits == 64;
  out.bits = static_cast<uint8_t>(std::min<unsigned>(f.bits, bits));
  return out;
}

// `op` of `in` by its registers, when it is a plain memory operand.
std::optional<MemoryRef> memory_ref(const Instruction& in, const Operand& op) {
  if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || in.segment_override()) return std::nullopt;
  MemoryRef ref;
  ref.scale = op.scale, ref.disp = op.disp, ref.size = op.size;
  if (op.base == ZYDIS_REGISTER_RIP) {
    ref.base = MemoryRef::kRip, ref.disp = static_cast<int64_t>(in.rip_address);
  } else if (op.base != ZYDIS_REGISTER_NONE) {
    int b = gpr_index(op.base);
    if (b < 0) return std::nullopt;
    ref.base = static_cast<int8_t>(b);
  }
  if (op.index != ZYDIS_REGISTER_NONE) {
    int x = gpr_index(op.index);
    if (x < 0) return std::nullopt;
    ref.index = static_cast<int8_t>(x);
  }
  return ref;
}

bool uses_register(const MemoryRef& m, uint16_t registers) {
  return (m.base >= 0 && (registers >> m.base) & 1) || (m.index >= 0 && (registers >> m.index) & 1);
}

// The flags `cmp R, imm` or `cmp [mem], imm` at `in` leaves.
std::optional<CompareFact> compare_of(const Instruction& in) {
  if (in.mnemonic != ZYDIS_MNEMONIC_CMP || in.operand_count != 2 || in.ops[1].type != ZYDIS_OPERAND_TYPE_IMMEDIATE)
    return std::nullopt;
  const unsigned w = in.ops[0].size;
  const uint64_t imm = in.ops[1].imm & mask_of(w);
  if (auto ref = memory_ref(in, in.ops[0])) return CompareFact{-1, 0, imm, ref};
  int r = in.ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER ? gpr_index(in.ops[0].reg) : -1;
  if (r < 0) return std::nullopt;
  return CompareFact{static_cast<int8_t>(r), static_cast<uint8_t>(w), imm, std::nullopt};
}

}  // namespace

uint64_t RegisterFact::max_of_low(unsigned w) const {
  int slot = low_slot(w);
  return slot < 0 ? max : std::min({max, mask_of(w), low_max[slot]});
}

int gpr_index(ZydisRegister r) {
  // ah, bh, ch, dh are bits 8-15: no fact here is about them (their writes
  // still make the whole register unknown, through register_use).
  if (r == ZYDIS_REGISTER_AH || r == ZYDIS_REGISTER_BH || r == ZYDIS_REGISTER_CH || r == ZYDIS_REGISTER_DH) return -1;
  uint16_t bit = gpr_bit(r);
  return bit ? __builtin_ctz(bit) : -1;
}

// A block's last jcc testing a compare: along one of its edges the compared
// bits are at most `bound`: the low `bits` bits of the value named `value`
// (so every register holding that name in no more bits), or `memory`.
struct RegisterFacts::Guard {
  uint32_t value = 0;
  uint8_t bits = 0;
  uint64_t bound = 0;
  bool on_taken = false;  // else on the fall-through
  std::optional<MemoryRef> memory;
};

RegisterFacts::RegisterFacts(const FunctionCfg& cfg) : cfg_(cfg) {
  uses_.reserve(cfg.instructions.size());
  for (const Instruction& in : cfg.instructions) uses_.push_back(register_use(in));
  solve();
}

RegisterState RegisterFacts::entry_state(std::size_t block) const {
  RegisterState s;
  for (std::size_t r = 0; r < s.regs.size(); ++r) s[r].value = phi(block, r);
  return s;
}

// Names: one per (instruction, register written), then one per (block, register).
uint32_t RegisterFacts::def_name(std::size_t i, std::size_t reg) { return static_cast<uint32_t>(1 + i * 16 + reg); }

uint32_t RegisterFacts::phi(std::size_t block, std::size_t reg) const {
  return static_cast<uint32_t>(1 + (cfg_.instructions.size() + block) * 16 + reg);
}

bool RegisterFacts::is_phi_of(std::size_t block, uint32_t value) const {
  return value >= phi(block, 0) && value <= phi(block, 15);
}

// What a load of `op` at `in` is known to read at most (UINT64_MAX: nothing known).
uint64_t RegisterFacts::bound_in_memory(const Instruction& in, const Operand& op, const RegisterState& s) const {
  auto ref = memory_ref(in, op);
  return ref && s.memory && s.memory->ref == *ref ? s.memory->max : UINT64_MAX;
}

RegisterFact RegisterFacts::produced(std::size_t i, const RegisterState& s) const {
  const Instruction& in = cfg_.instructions[i];
  const Operand& d = in.ops[0];
  const Operand& src = in.ops[1];
  const uint32_t name = def_name(i, gpr_index(d.reg));
  const bool two = in.operand_count >= 2;
  const int from = two && src.type == ZYDIS_OPERAND_TYPE_REGISTER ? gpr_index(src.reg) : -1;
  RegisterFact out;
  out.value = name;
  if (d.size < 32) return out;  // a partial write keeps bits nothing tracks
  // bsf/bsr leave the destination as it was when the source is 0.
  if (in.mnemonic == ZYDIS_MNEMONIC_BSF || in.mnemonic == ZYDIS_MNEMONIC_BSR) return out;
  if (d.size == 32) out.max = mask_of(32);
  switch (in.mnemonic) {
    case ZYDIS_MNEMONIC_MOV:
      if (from >= 0) return narrowed(s[from], d.size);
      if (two && src.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
        out.constant = src.imm & mask_of(d.size);
        out.max = *out.constant;
      }
      if (two && src.size == d.size) out.max = std::min(out.max, bound_in_memory(in, src, s));
      out.pointer = two && d.size == 64 && src.type == ZYDIS_OPERAND_TYPE_MEMORY && src.index == ZYDIS_REGISTER_NONE;
      return out;
    case ZYDIS_MNEMONIC_MOVZX:
      if (from >= 0) return narrowed(s[from], src.size);
      out.max = std::min(mask_of(src.size), bound_in_memory(in, src, s));  // from memory
      return out;
    case ZYDIS_MNEMONIC_MOVSXD:
      // Sign-extending a value below 2^31 is zero-extending it.
      if (from >= 0 && s[from].max_of_low(32) <= mask_of(31)) return narrowed(s[from], 32);
      return out;
    case ZYDIS_MNEMONIC_LEA:
      if (in.rip_relative && d.size == 64) out.constant = out.max = in.rip_address, out.address = true;
      return out;
    case ZYDIS_MNEMONIC_AND: {
      const RegisterFact& old = s[gpr_index(d.reg)];
      uint64_t limit = std::min(old.max, mask_of(d.size));
      if (two && src.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
        uint64_t imm = src.imm & mask_of(d.size);
        if (d.size == 32 || !(imm >> 63)) limit = std::min(limit, imm);
      } else if (from >= 0) {
        limit = std::min(limit, s[from].max);
      }
      out.max = limit;
      return out;
    }
    case ZYDIS_MNEMONIC_XOR:
      if (from >= 0 && gpr_index(d.reg) == from) out.constant = out.max = 0;
      return out;
    default: return out;
  }
}

void RegisterFacts::step(std::size_t i, RegisterState& s) const {
  for (RegisterFact& f : s.regs)  // this instruction runs again: its old values have no name now
    if (f.value >= def_name(i, 0) && f.value <= def_name(i, 15)) f.value = 0;
  const RegisterUse& use = uses_[i];
  const uint16_t written = use.written;
  const Instruction& in = cfg_.instructions[i];
  const Operand& d = in.ops[0];
  int dest = -1;
  if (written && in.operand_count >= 1 && d.type == ZYDIS_OPERAND_TYPE_REGISTER &&
      (d.actions & ZYDIS_OPERAND_ACTION_WRITE) && !(d.actions & ZYDIS_OPERAND_ACTION_CONDWRITE))
    dest = gpr_index(d.reg);
  // What it leaves, from the state before it (mov eax, [rax] reads the bound on [rax]).
  RegisterFact result = dest >= 0 ? produced(i, s) : RegisterFact{};
  if (use.writes_flags) s.flags = compare_of(in);
  // A store may change the compared memory, or the bounded one.
  if (s.flags && s.flags->memory && use.writes_memory) s.flags.reset();
  if (s.memory && (use.writes_memory || uses_register(s.memory->ref, written))) s.memory.reset();
  if (!written) return;
  // Every other register written (hidden operands, a call's clobbers, a
  // conditional write) is unknown, a value of its own.
  for (std::size_t r = 0; r < s.regs.size(); ++r)
    if (written & (1u << r)) s[r] = RegisterFact{}, s[r].value = def_name(i, r);
  if (dest >= 0) s[dest] = result;
  // Flags about a register (or an address) this wrote no longer describe it.
  if (s.flags && !use.writes_flags &&
      ((s.flags->reg >= 0 && (written >> s.flags->reg) & 1) ||
       (s.flags->memory && uses_register(*s.flags->memory, written))))
    s.flags.reset();
}

// The bound the block's last jcc puts on one of its edges, from the flags
// at its end (set in this block or, when nothing in it writes flags, in
// the blocks before: the state carries them). For a register compare, the
// compared bits are all of R when R fits in them.
std::optional<RegisterFacts::Guard> RegisterFacts::guard_of(const Block& b, const RegisterState& end) const {
  const Instruction& last = cfg_.instructions[b.first + b.count - 1];
  if (last.flow != Flow::CondBranch || !end.flags) return std::nullopt;
  const CompareFact& c = *end.flags;
  Guard g{0, 0, c.imm, false, c.memory};
  if (!c.memory) {
    const RegisterFact& f = end[c.reg];
    if (!f.value) return std::nullopt;
    g.value = f.value;
    g.bits = static_cast<uint8_t>(f.max <= mask_of(c.width) ? f.bits : std::min<unsigned>(c.width, f.bits));
  }
  switch (last.mnemonic) {
    case ZYDIS_MNEMONIC_JNBE: g.on_taken = false; break;  // ja: falls through when <= imm
    case ZYDIS_MNEMONIC_JBE: g.on_taken = true; break;
    case ZYDIS_MNEMONIC_JNB:  // jae: falls through when < imm
    case ZYDIS_MNEMONIC_JB:
      if (g.bound == 0) return std::nullopt;
      g.bound -= 1;
      g.on_taken = last.mnemonic == ZYDIS_MNEMONIC_JB;
      break;
    default: return std::nullopt;
  }
  return g;
}

RegisterState RegisterFacts::out_along(std::size_t from, uint64_t to) const {
  const Block& b = cfg_.blocks[from];
  RegisterState s = in_[from] ? *in_[from] : entry_state(from);
  for (std::size_t i = b.first; i < b.first + b.count; ++i) step(i, s);
  std::optional<Guard> g = guard_of(b, s);
  if (!g) return s;
  const Instruction& last = cfg_.instructions[b.first + b.count - 1];
  bool taken = to == last.target && to != last.end();
  bool falls = to == last.end() && to != last.target;
  if ((g->on_taken && !taken) || (!g->on_taken && !falls)) return s;
  if (g->memory) {
    s.memory = MemoryBound{*g->memory, g->bound};
    return s;
  }
  for (RegisterFact& f : s.regs) {
    if (f.value != g->value) continue;
    if (f.bits <= g->bits) f.max = std::min(f.max, g->bound);
    else f.low_max[low_slot(g->bits)] = std::min(f.low_max[low_slot(g->bits)], g->bound);  // bits > g->bits: 8, 16 or 32
  }
  return s;
}

// Joins `incoming` into the block's state; true when it changed. Facts only
// weaken, so the iteration ends: a bound grows, a constant or a flags or
// memory fact that differs is dropped, and a name that differs between
// paths, or that this block's own join gave (it came around a loop: an
// older entry's value), becomes this block's phi, for good.
bool RegisterFacts::join_into(std::size_t block, const RegisterState& incoming) {
  RegisterState merged = in_[block] ? *in_[block] : incoming;
  if (merged.flags != incoming.flags) merged.flags.reset();
  if (merged.memory && incoming.memory && merged.memory->ref == incoming.memory->ref)
    merged.memory->max = std::max(merged.memory->max, incoming.memory->max);
  else
    merged.memory.reset();
  for (std::size_t r = 0; r < merged.regs.size(); ++r) {
    RegisterFact& m = merged[r];
    const RegisterFact& c = incoming[r];
    m.max = std::max(m.max, c.max);
    for (std::size_t k = 0; k < m.low_max.size(); ++k) m.low_max[k] = std::max(m.low_max[k], c.low_max[k]);
    if (m.constant != c.constant || m.address != c.address) m.constant.reset(), m.address = false;
    m.pointer = m.pointer && c.pointer;
    bool same_name = m.value == c.value && m.bits == c.bits && m.value != 0;
    if (!same_name || is_phi_of(block, m.value)) m.value = phi(block, r), m.bits = 64;
  }
  if (in_[block] && *in_[block] == merged) return false;
  in_[block] = merged;
  return true;
}

void RegisterFacts::solve() {
  const std::size_t n = cfg_.blocks.size();
  in_.assign(n, std::nullopt);
  std::vector<bool> queued(n, false);
  auto index_of = [&](uint64_t start) -> std::size_t { return cfg_.block_at(start) - cfg_.blocks.data(); };
  // Only the start: a block no path from it reaches (padding after a jmp,
  // code only other functions jumped to) never runs in the copy, and
  // before() gives it the unknown state.
  if (!cfg_.block_at(cfg_.start)) return;
  std::deque<std::size_t> work{index_of(cfg_.start)};
  in_[work.front()] = entry_state(work.front());
  queued[work.front()] = true;
  std::size_t visits = 0;
  while (!work.empty()) {
    if (++visits > kVisitsPerBlock * n + 1000) {
      settled_ = false;
      for (std::size_t k = 0; k < n; ++k) in_[k] = entry_state(k);
      return;
    }
    std::size_t k = work.front();
    work.pop_front();
    queued[k] = false;
    for (uint64_t s : cfg_.blocks[k].successors) {
      std::size_t to = index_of(s);
      if (join_into(to, out_along(k, s)) && !queued[to]) queued[to] = true, work.push_back(to);
    }
  }
}

RegisterState RegisterFacts::before(std::size_t i) const {
  const Block* b = cfg_.block_at(cfg_.instructions[i].addr);
  std::size_t k = b - cfg_.blocks.data();
  RegisterState s = in_[k] ? *in_[k] : entry_state(k);
  for (std::size_t j = b->first; j < i; ++j) step(j, s);
  return s;
}

}  // namespace dyni::jit
