// Building a function's CFG: leaders, blocks, successors, jump tables.
#include "jit/cfg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "jit/decoder.h"
#include "jit/register_facts.h"
#include "jit/relocator.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kMaxTableEntries = 4096;
constexpr std::size_t kPatternWindow = 16;  // instructions searched back for a table's parts

ZydisRegister widest(ZydisRegister r) {
  return ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r);
}

bool is_reg(const Operand& op, ZydisRegister r) {
  return op.type == ZYDIS_OPERAND_TYPE_REGISTER && widest(op.reg) == r;
}

// The number of entries a `cmp X, imm` then `jcc` guard allows, or none.
std::optional<uint64_t> bound_of(ZydisMnemonic guard, uint64_t imm) {
  switch (guard) {
    case ZYDIS_MNEMONIC_JNBE:  // ja: taken when idx > imm → entries 0..imm
    case ZYDIS_MNEMONIC_JBE: return imm + 1;
    case ZYDIS_MNEMONIC_JNB:   // jae: taken when idx >= imm
    case ZYDIS_MNEMONIC_JB: return imm;
    default: return std::nullopt;
  }
}

bool same_memory(const Instruction& a, const Operand& x, const Instruction& b, const Operand& y) {
  if (x.type != ZYDIS_OPERAND_TYPE_MEMORY || y.type != ZYDIS_OPERAND_TYPE_MEMORY || x.size != y.size) return false;
  if (x.base == ZYDIS_REGISTER_RIP || y.base == ZYDIS_REGISTER_RIP)
    return x.base == y.base && a.rip_address == b.rip_address;
  return x.base == y.base && x.index == y.index && x.scale == y.scale && x.disp == y.disp;
}

bool writes_register(const Instruction& in, ZydisRegister r) {
  return r != ZYDIS_REGISTER_NONE && in.operand_count >= 1 && is_reg(in.ops[0], r) &&
         (in.ops[0].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE);
}

// True when register `r` at instruction `at` holds the value that `idx` holds
// at instruction `to`: value numbering over register copies (mov reg,reg)
// in a window around them; any other write gives a register a new value.
bool same_value(const std::vector<Instruction>& ins, std::size_t at, ZydisRegister r, std::size_t to,
                ZydisRegister idx) {
  std::map<ZydisRegister, std::size_t> value;  // absent: its value at the window start
  auto value_of = [&](ZydisRegister x) {
    auto it = value.find(x);
    return it != value.end() ? it->second : static_cast<std::size_t>(x) + (1u << 20);
  };
  std::size_t from = at > kPatternWindow ? at - kPatternWindow : 0, compared = 0;
  for (std::size_t i = from; i < to; ++i) {
    if (i == at) compared = value_of(r);
    const Instruction& in = ins[i];
    if (in.operand_count < 1 || in.ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
        !(in.ops[0].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE))
      continue;
    bool copy = in.mnemonic == ZYDIS_MNEMONIC_MOV && in.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                in.ops[0].size >= 32;
    value[widest(in.ops[0].reg)] = copy ? value_of(widest(in.ops[1].reg)) : i;
  }
  return compared == value_of(idx);
}

// What the index was loaded from, followed back: a register, or (after
// `mov idx, [mem]`) that memory operand, which the guard may compare instead.
struct IndexSource {
  ZydisRegister reg = ZYDIS_REGISTER_NONE;
  const Instruction* load = nullptr;  // set: the index came from load->ops[1]
};

// Entries guarded by `cmp idx, imm; ja/jae default` before instruction `at`,
// following register copies (mov eax, edi) back to the compared register and
// a load back to a compare of the same memory (no store, call or address
// change in between).
std::optional<uint64_t> find_bound(const std::vector<Instruction>& ins, std::size_t at, ZydisRegister idx) {
  std::optional<ZydisMnemonic> guard;
  IndexSource src{idx, nullptr};
  for (std::size_t back = 1; back <= 32 && back <= at; ++back) {
    const Instruction& in = ins[at - back];
    if (in.flow == Flow::CondBranch && !guard) guard = in.mnemonic;
    bool is_cmp = in.mnemonic == ZYDIS_MNEMONIC_CMP && in.ops[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE;
    if (is_cmp && guard) {
      bool on_reg = !src.load && in.ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                    (is_reg(in.ops[0], src.reg) || same_value(ins, at - back, widest(in.ops[0].reg), at, idx));
      bool on_mem = src.load && same_memory(in, in.ops[0], *src.load, src.load->ops[1]);
      if (on_reg || on_mem) return bound_of(*guard, in.ops[1].imm);
    }
    if (src.load) {
      const Operand& m = src.load->ops[1];
      bool stores = in.operand_count >= 1 && in.ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY &&
                    (in.ops[0].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE);
      if (stores || in.flow == Flow::Call || in.flow == Flow::IndirectCall || writes_register(in, widest(m.base)) ||
          writes_register(in, widest(m.index)))
        return std::nullopt;
      continue;
    }
    if (!writes_register(in, src.reg) || in.operand_count < 2) {
      if (writes_register(in, src.reg)) return std::nullopt;
      continue;
    }
    bool copy_or_load = in.mnemonic == ZYDIS_MNEMONIC_MOV || in.mnemonic == ZYDIS_MNEMONIC_MOVZX ||
                        in.mnemonic == ZYDIS_MNEMONIC_MOVSXD;
    if (!copy_or_load) return std::nullopt;  // idx computed otherwise: no provable bound
    if (in.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER) src.reg = widest(in.ops[1].reg);
    else if (in.ops[1].type == ZYDIS_OPERAND_TYPE_MEMORY) src.load = &in;
    else return std::nullopt;
  }
  return std::nullopt;
}

// Searches back from `at` for the latest instruction matching `pred`.
template <typename Pred>
std::optional<std::size_t> find_back(const std::vector<Instruction>& ins, std::size_t at, Pred pred) {
  for (std::size_t back = 1; back <= kPatternWindow && back <= at; ++back)
    if (pred(ins[at - back])) return at - back;
  return std::nullopt;
}

struct TablePattern {
  uint64_t table = 0;
  unsigned entry_size = 0;
  ZydisRegister index = ZYDIS_REGISTER_NONE;
  std::size_t load_at = 0;  // the instruction that reads the table
};

// gcc/clang PIC:  lea B,[rip+T]; movsxd J,dword [B+X*4]; add J,B; jmp J
std::optional<TablePattern> match_pic_table(const std::vector<Instruction>& ins, std::size_t jmp) {
  if (ins[jmp].ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER) return std::nullopt;
  ZydisRegister j = widest(ins[jmp].ops[0].reg);
  auto add = find_back(ins, jmp, [&](const Instruction& in) {
    return in.mnemonic == ZYDIS_MNEMONIC_ADD && is_reg(in.ops[0], j) &&
           in.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER;
  });
  if (!add) return std::nullopt;
  ZydisRegister base = widest(ins[*add].ops[1].reg);
  auto load = find_back(ins, *add, [&](const Instruction& in) {
    const auto& m = in.ops[1];
    return in.mnemonic == ZYDIS_MNEMONIC_MOVSXD && is_reg(in.ops[0], j) &&
           m.type == ZYDIS_OPERAND_TYPE_MEMORY && widest(m.base) == base && m.scale == 4 &&
           m.disp == 0;
  });
  if (!load) return std::nullopt;
  auto lea = find_back(ins, *load, [&](const Instruction& in) {
    return in.mnemonic == ZYDIS_MNEMONIC_LEA && is_reg(in.ops[0], base) && in.rip_relative;
  });
  if (!lea) return std::nullopt;
  return TablePattern{ins[*lea].rip_address, 4, widest(ins[*load].ops[1].index), *load};
}

// Non-PIC absolute:  jmp qword [X*8 + T]
std::optional<TablePattern> match_absolute_table(const std::vector<Instruction>& ins, std::size_t jmp) {
  const auto& m = ins[jmp].ops[0];
  if (m.type != ZYDIS_OPERAND_TYPE_MEMORY || m.base != ZYDIS_REGISTER_NONE || m.scale != 8 ||
      m.index == ZYDIS_REGISTER_NONE)
    return std::nullopt;
  return TablePattern{static_cast<uint64_t>(m.disp), 8, widest(m.index), jmp};
}

// A tail call through a function pointer: `jmp [reg+disp]` / `jmp [rip+x]`,
// or `jmp reg` whose register was loaded from such an unindexed slot (an
// object's or the GOT's). Jump tables are indexed; these are not. The copy
// jumps to the same address the original would: the pointer's target.
bool is_pointer_tail_call(const std::vector<Instruction>& ins, std::size_t jmp) {
  const Operand& op = ins[jmp].ops[0];
  if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) return op.index == ZYDIS_REGISTER_NONE;
  if (op.type != ZYDIS_OPERAND_TYPE_REGISTER) return false;
  ZydisRegister r = widest(op.reg);
  auto load = find_back(ins, jmp, [&](const Instruction& in) { return writes_register(in, r); });
  if (!load) return false;
  const Instruction& in = ins[*load];
  return in.mnemonic == ZYDIS_MNEMONIC_MOV && in.ops[0].size == 64 && in.ops[1].type == ZYDIS_OPERAND_TYPE_MEMORY &&
         in.ops[1].index == ZYDIS_REGISTER_NONE;
}

// The targets of `entries` entries of the table at `table`: 4-byte entries
// relative to the table, or 8-byte absolute addresses as the loaded module
// holds them (module_image.h, read_address).
Result<std::vector<uint64_t>> read_targets(const ModuleImage& image, uint64_t table, unsigned entry_size,
                                           uint64_t entries) {
  std::vector<uint64_t> targets;
  if (entry_size == 4) {
    auto bytes = image.read(table, entries * 4);
    if (!bytes) return fail(fmt::format("jump table unreadable at {:#x}", table));
    for (uint64_t k = 0; k < entries; ++k) {
      int32_t rel;
      std::memcpy(&rel, bytes->data() + 4 * k, 4);
      targets.push_back(table + static_cast<uint64_t>(static_cast<int64_t>(rel)));
    }
    return targets;
  }
  for (uint64_t k = 0; k < entries; ++k) {
    auto target = image.read_address(table + 8 * k);
    if (!target) return fail(fmt::format("jump table unreadable at {:#x}", table));
    targets.push_back(*target);
  }
  return targets;
}

// The window-bounded patterns, the first guess and the fallback: the bound
// comes from a compare near the load (find_bound), which is not proven on
// every path: such a table is never rebuilt, and its copied jump reads the
// original table, so a wrong bound only loses edges of the CFG.
Result<JumpTable> resolve_locally(const std::vector<Instruction>& ins, std::size_t jmp, const ModuleImage& image) {
  auto pattern = match_pic_table(ins, jmp);
  if (!pattern) pattern = match_absolute_table(ins, jmp);
  if (!pattern) return fail(fmt::format("indirect jump unresolved at {:#x}", ins[jmp].addr));
  auto entries = find_bound(ins, pattern->load_at, pattern->index);
  if (!entries || *entries == 0 || *entries > kMaxTableEntries)
    return fail(fmt::format("jump table without a provable bound at {:#x}", ins[jmp].addr));
  auto targets = read_targets(image, pattern->table, pattern->entry_size, *entries);
  if (!targets) return std::unexpected(targets.error());
  return JumpTable{ins[jmp].addr, pattern->table, pattern->entry_size, std::move(*targets), ins[pattern->load_at].addr,
                   false, false};
}

bool same_table(const JumpTable& a, const JumpTable& b) {
  return a.table_addr == b.table_addr && a.entry_size == b.entry_size && a.targets == b.targets &&
         a.load_addr == b.load_addr && a.proven == b.proven;
}

// How a jump reads its table, as the register facts show it:
//   PIC       movsxd J,[B+X*4+d] ... add J,R ... jmp J   (B+d = R = the table)
//   absolute  mov J,[B+X*8+d] ... jmp J,  or  jmp [B+X*8+d]   (B+d = the table)
// B a register holding one address on every path, or absent (d absolute,
// in a position-dependent executable); X bounded on every path.
struct Dispatch {
  std::size_t load = 0;
  std::size_t add = SIZE_MAX;                    // PIC only
  ZydisRegister entry_reg = ZYDIS_REGISTER_NONE; // J; none for jmp [mem]
  uint64_t table = 0;
  unsigned entry_size = 0;
  uint64_t entries = 0;
};

class CfgBuilder {
 public:
  CfgBuilder(FunctionCfg& cfg, const ModuleImage& image) : cfg_(cfg), image_(image) {
    for (std::size_t i = 0; i < cfg_.instructions.size(); ++i) index_[cfg_.instructions[i].addr] = i;
  }

  Status build() {
    for (const Instruction& in : cfg_.instructions)
      if (auto r = check_relocatable(in); !r) return r;
    if (auto r = check_references(); !r) return r;
    resolve_locally_all();
    // Tables add edges, edges change the facts, the facts resolve and bound
    // tables: repeated until nothing changes, so that the last facts are
    // those of the final CFG and every proven table is proven on it.
    for (int round = 0; round < kRounds; ++round) {
      cfg_.tables.clear();
      for (const auto& [jmp, t] : tables_) cfg_.tables.push_back(t);
      cfg_.blocks.clear();
      leaders_.clear();
      if (auto r = find_leaders(); !r) return r;
      make_blocks();
      if (jumps_.empty()) return ok();
      RegisterFacts facts(cfg_);
      if (!resolve_by_facts_all(facts)) {
        if (!unresolved_.empty()) return fail(unresolved_.begin()->second);
        mark_rebuildable();  // dispatch_ holds what these facts, the final CFG's, resolved
        return ok();
      }
    }
    return fail(fmt::format("jump tables do not settle at {:#x}", cfg_.start));
  }

 private:
  static constexpr int kRounds = 8;

  bool inside(uint64_t a) const { return a >= cfg_.start && a < cfg_.end; }

  Status check_target(uint64_t target, uint64_t from) const {
    if (inside(target) && !index_.count(target))
      return fail(fmt::format("branch into the middle of an instruction at {:#x}", from));
    return ok();
  }

  // Code that reads its own bytes, takes the address of its own interior or
  // calls into it cannot be moved without changing what it sees.
  Status check_references() const {
    for (const Instruction& in : cfg_.instructions) {
      // A call into its own body pushes a cache address the body may read (PIC thunks).
      if (in.flow == Flow::Call && inside(in.target) && in.target != cfg_.start)
        return fail(fmt::format("call into its own body at {:#x}", in.addr));
      if (!in.rip_relative || !inside(in.rip_address)) continue;
      if (in.mnemonic == ZYDIS_MNEMONIC_LEA) {
        if (in.rip_address != cfg_.start)
          return fail(fmt::format("code address taken at {:#x}", in.addr));
      } else {
        return fail(fmt::format("code reads its own bytes at {:#x}", in.addr));
      }
    }
    return ok();
  }

  // Entries may leave the function for other code (gcc's .cold parts):
  // those are exits. Inside, they must be instruction boundaries, and the
  // table must not lie in the function's own bytes.
  Status check_table(const JumpTable& t) const {
    uint64_t size = t.entry_size * t.targets.size();
    if (t.table_addr < cfg_.end && t.table_addr + size > cfg_.start)
      return fail(fmt::format("jump table overlaps code at {:#x}", t.jump_addr));
    for (uint64_t target : t.targets) {
      if (inside(target) && !index_.count(target))
        return fail(fmt::format("jump table entry inside an instruction at {:#x}", t.jump_addr));
      if (!inside(target) && !image_.is_code(target))
        return fail(fmt::format("jump table entry outside the code at {:#x}", t.jump_addr));
    }
    return ok();
  }

  Result<JumpTable> checked(Result<JumpTable> t) const {
    if (!t) return t;
    if (auto r = check_table(*t); !r) return std::unexpected(r.error());
    return t;
  }

  void resolve_locally_all() {
    const auto& ins = cfg_.instructions;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      if (ins[i].flow != Flow::IndirectBranch) continue;
      auto table = checked(resolve_locally(ins, i, image_));
      if (!table && is_pointer_tail_call(ins, i)) continue;  // leaves the function
      jumps_.push_back(i);
      if (table) tables_[ins[i].addr] = std::move(*table);
      else unresolved_[ins[i].addr] = table.error().message();
    }
  }

  // One round: every jump the facts resolve takes that table (proven);
  // one they no longer resolve falls back to its local guess. True when
  // any table changed.
  bool resolve_by_facts_all(const RegisterFacts& facts) {
    bool changed = false;
    for (std::size_t i : jumps_) {
      const uint64_t addr = cfg_.instructions[i].addr;
      auto dispatch = dispatch_of(i, facts);
      auto table = dispatch ? checked(table_of(i, *dispatch)) : std::unexpected(dispatch.error());
      auto had = tables_.find(addr);
      if (table) {
        dispatch_[addr] = *dispatch;
        unresolved_.erase(addr);
        if (had == tables_.end() || !same_table(had->second, *table)) tables_[addr] = std::move(*table), changed = true;
        continue;
      }
      dispatch_.erase(addr);
      if (had == tables_.end() && loads_a_pointer(i, facts)) {
        unresolved_.erase(addr);  // a tail call through a pointer loaded blocks before: an exit
        continue;
      }
      if (had != tables_.end() && !had->second.proven) continue;  // the local guess stands
      if (had != tables_.end()) tables_.erase(had), changed = true;
      auto local = checked(resolve_locally(cfg_.instructions, i, image_));
      if (local) tables_[addr] = std::move(*local), changed = true;
      // A form the facts recognised says more than the local patterns.
      else unresolved_[addr] = dispatch ? table.error().message() : local.error().message();
    }
    return changed;
  }

  // `jmp reg` whose register holds, on every path, a value loaded whole
  // from an unindexed slot (an object's or a global's function pointer):
  // a tail call, like is_pointer_tail_call's but loaded in another block.
  // The copy jumps where the original would.
  bool loads_a_pointer(std::size_t jmp, const RegisterFacts& facts) const {
    const Operand& op = cfg_.instructions[jmp].ops[0];
    if (op.type != ZYDIS_OPERAND_TYPE_REGISTER || op.size != 64) return false;
    const RegisterState at = facts.before(jmp);
    return at[gpr_index(op.reg)].pointer;
  }

  Result<JumpTable> table_of(std::size_t jmp, const Dispatch& d) const {
    auto targets = read_targets(image_, d.table, d.entry_size, d.entries);
    if (!targets) return std::unexpected(targets.error());
    return JumpTable{cfg_.instructions[jmp].addr, d.table, d.entry_size, std::move(*targets),
                     cfg_.instructions[d.load].addr, true, false};
  }

  // The latest instruction before `at` in its block that may write `r`.
  std::optional<std::size_t> last_writer(std::size_t at, ZydisRegister r) {
    const Block* b = cfg_.block_at(cfg_.instructions[at].addr);
    const uint16_t bit = gpr_bit(r);
    for (std::size_t i = at; i-- > b->first;)
      if (use_of(i).written & bit) return i;
    return std::nullopt;
  }

  Result<Dispatch> dispatch_of(std::size_t jmp, const RegisterFacts& facts) {
    const auto& ins = cfg_.instructions;
    const Operand& op = ins[jmp].ops[0];
    const std::string unresolved = fmt::format("indirect jump unresolved at {:#x}", ins[jmp].addr);
    Dispatch d;
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) {
      d.load = jmp, d.entry_size = 8;
    } else if (op.type == ZYDIS_OPERAND_TYPE_REGISTER && op.size == 64) {
      d.entry_reg = op.reg;
      auto w = last_writer(jmp, op.reg);
      if (!w) return fail(unresolved);
      const Instruction& last = ins[*w];
      if (last.mnemonic == ZYDIS_MNEMONIC_ADD && is_reg(last.ops[0], op.reg) && last.ops[0].size == 64 &&
          last.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER && last.ops[1].size == 64) {
        auto load = last_writer(*w, op.reg);
        if (!load || ins[*load].mnemonic != ZYDIS_MNEMONIC_MOVSXD) return fail(unresolved);
        d.add = *w, d.load = *load, d.entry_size = 4;
      } else if (last.mnemonic == ZYDIS_MNEMONIC_MOV && last.ops[0].size == 64) {
        d.load = *w, d.entry_size = 8;
      } else {
        return fail(unresolved);
      }
    } else {
      return fail(unresolved);
    }
    const Instruction& load = ins[d.load];
    const Operand* m = load.memory();
    const int x = m ? gpr_index(m->index) : -1;
    if (!m || x < 0 || widest(m->index) != m->index || m->scale != d.entry_size || m->base == ZYDIS_REGISTER_RIP ||
        load.segment_override() || (d.load != jmp && !is_reg(load.ops[0], widest(op.reg))))
      return fail(unresolved);
    RegisterState at_load = facts.before(d.load);
    if (m->base == ZYDIS_REGISTER_NONE) {
      if (!image_.fixed_address()) return fail(unresolved);  // an absolute address in a PIE is not the module's
      d.table = static_cast<uint64_t>(m->disp);
    } else {
      const RegisterFact& base = at_load[gpr_index(m->base)];
      // In a PIE only a module address (lea [rip+x]) moves with the bias as the table does.
      if (!base.constant || (!base.address && !image_.fixed_address())) return fail(unresolved);
      d.table = *base.constant + static_cast<uint64_t>(m->disp);
    }
    if (d.entry_size == 4) {
      const RegisterState at_add = facts.before(d.add);
      const RegisterFact& r = at_add[gpr_index(ins[d.add].ops[1].reg)];
      if (!r.constant || *r.constant != d.table || (!r.address && !image_.fixed_address()))
        return fail(unresolved);  // entries relative to the table
    }
    const uint64_t max = at_load[x].max;
    if (max >= kMaxTableEntries)
      return fail(fmt::format("jump table without a provable bound at {:#x}", ins[jmp].addr));
    d.entries = max + 1;
    return d;
  }

  // A proven table is rebuilt when the entry it loads (J) is used by
  // nothing but the jump: read by no instruction between the load and the
  // jump but the PIC add, and dead where the jump lands. The copy's J holds
  // a copy's address where the original's held the original target's: code
  // that kept or compared it (a computed goto's pointer, still live after
  // the jump) would see the difference. An absolute entry is a label's
  // address that C can name (&&label), so a function could pass it on or
  // return it: it must be dead where the jump lands, a call reading the
  // argument registers and a return rax and rdx. A 4-byte entry plus the
  // table's own address is a switch's temporary that no source expression
  // names (a relative computed goto adds a label's address, not the
  // table's, and is not resolved): compilers merge case code across paths,
  // so a target may read the register on a path where the result is unused
  // (gawk: `test eax, eax; setle r13b` shared by two switches); no
  // liveness is asked there.
  void mark_rebuildable() {
    for (JumpTable& t : cfg_.tables) {
      auto d = dispatch_.find(t.jump_addr);
      t.rebuildable = t.proven && d != dispatch_.end() && entry_used_only_by_jump(d->second, t) &&
                      image_.is_read_only(t.table_addr, t.entry_size * t.targets.size());
    }
  }

  bool entry_used_only_by_jump(const Dispatch& d, const JumpTable& t) {
    if (d.entry_reg == ZYDIS_REGISTER_NONE) return true;  // jmp [mem]: the entry is in no register
    const uint16_t bit = gpr_bit(d.entry_reg);
    const std::size_t jmp = index_.at(t.jump_addr);
    for (std::size_t i = d.load + 1; i < jmp; ++i)
      if (i != d.add && (use_of(i).read & bit)) return false;
    if (d.entry_size == 4) return true;
    // A landing pad (in the original code) reached from a call after the
    // jump would see a callee-saved J as the unwinder restores it: the
    // copy's address. Compilers dispatch through scratch registers.
    if (gpr_bit(d.entry_reg) & kCalleeSaved) return false;
    // Outside the function (a .cold part) nothing shows what reads J: the
    // rebuilt table sends those entries to the original target itself, not
    // to a copy of it, so J holds there what it held (emitter.cpp).
    for (uint64_t target : t.targets)
      if (inside(target) && !dead_from(target, d.entry_reg)) return false;
    return true;
  }

  // Whether `r`'s value is dead at `from`: on every path it is written
  // whole before anything reads it. Leaving the function counts as a read
  // of what a callee or caller may see: a call or a tail call through a
  // pointer reads the argument registers and the callee-saved ones, a
  // return rax, rdx and the callee-saved ones; a direct branch out (to the
  // function's .cold part, say) is followed there.
  bool dead_from(uint64_t from, ZydisRegister r) {
    const Block* b = cfg_.block_at(from);
    if (!b) return false;
    return !live_in(r)[b - cfg_.blocks.data()];
  }

  enum class Effect { Reads, Kills, Through };

  // What one instruction does to `r`: reads it, writes all of it (a 32- or
  // 64-bit destination, `xor r, r`, a call's clobber), or neither. bsf and
  // bsr keep their destination when the source is 0: no kill.
  static Effect effect_of(const Instruction& in, const RegisterUse& use, ZydisRegister r) {
    const uint16_t bit = gpr_bit(r);
    bool zeroing = (in.mnemonic == ZYDIS_MNEMONIC_XOR || in.mnemonic == ZYDIS_MNEMONIC_SUB) &&
                   in.operand_count == 2 && is_reg(in.ops[0], r) && in.ops[0].size >= 32 &&
                   in.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER && in.ops[1].reg == in.ops[0].reg;
    if (zeroing) return Effect::Kills;
    if (use.read & bit) return Effect::Reads;
    const Operand& dst = in.ops[0];
    bool keeps = in.mnemonic == ZYDIS_MNEMONIC_BSF || in.mnemonic == ZYDIS_MNEMONIC_BSR;
    bool whole = !keeps && in.operand_count >= 1 && is_reg(dst, r) && dst.size >= 32 &&
                 (dst.actions & ZYDIS_OPERAND_ACTION_WRITE) && !(dst.actions & ZYDIS_OPERAND_ACTION_CONDWRITE);
    bool clobbered = (use.written & bit) && (in.flow == Flow::Call || in.flow == Flow::IndirectCall);
    return whole || clobbered ? Effect::Kills : Effect::Through;
  }

  // What block `b` does to `r` first.
  Effect effect_on(const Block& b, ZydisRegister r) {
    for (std::size_t i = b.first; i < b.first + b.count; ++i)
      if (Effect e = effect_of(cfg_.instructions[i], use_of(i), r); e != Effect::Through) return e;
    return Effect::Through;
  }

  static constexpr uint16_t kReturned = (1u << 0) | (1u << 2);  // rax, rdx
  static constexpr std::size_t kOutsideBudget = 256;  // instructions decoded past the function, per exit

  // What the code at `from`, outside the function (its .cold part, or a
  // function it tail-calls), does with `r`: `live` when some path may read
  // it (or the scan cannot tell within its budget), else the addresses in
  // the function where paths come back, whose liveness then decides.
  struct Outside {
    bool live = false;
    std::vector<uint64_t> back_in;
  };
  Outside scan_outside(uint64_t from, ZydisRegister r) const {
    const uint16_t bit = gpr_bit(r);
    Outside out;
    std::vector<uint64_t> work{from};
    std::set<uint64_t> seen;
    std::size_t budget = kOutsideBudget;
    while (!work.empty() && !out.live) {
      uint64_t at = work.back();
      work.pop_back();
      if (!seen.insert(at).second) continue;
      if (inside(at)) {
        out.back_in.push_back(at);
        continue;
      }
      while (true) {
        auto bytes = image_.read(at, 1);
        auto in = bytes && image_.is_code(at) ? decode_one(image_.read(at, 15).value_or(*bytes), at)
                                              : fail("not code");
        if (!in || budget-- == 0) return {true, {}};
        Effect e = effect_of(*in, register_use(*in), r);
        if (e == Effect::Reads) return {true, {}};
        if (e == Effect::Kills) break;
        if (in->flow == Flow::Return) {
          if (bit & (kReturned | kCalleeSaved)) return {true, {}};
          break;
        }
        if (in->flow == Flow::Stop) break;
        // A jump through a register or table out there may come back
        // anywhere, or to code that reads r.
        if (in->flow == Flow::IndirectBranch) return {true, {}};
        if (in->flow == Flow::Branch) {
          work.push_back(in->target);
          break;
        }
        if (in->flow == Flow::CondBranch) work.push_back(in->target);
        at = in->end();
        if (inside(at)) {
          work.push_back(at);
          break;
        }
      }
    }
    return out;
  }

  // Per block: whether `r` is live at its start (backward, to a fixed point).
  // A branch out of the function is followed into the code it reaches
  // (scan_outside); a path that comes back adds that block as a successor.
  const std::vector<bool>& live_in(ZydisRegister r) {
    if (auto it = live_.find(widest(r)); it != live_.end()) return it->second;
    const std::size_t n = cfg_.blocks.size();
    const uint16_t bit = gpr_bit(r);
    std::vector<Effect> effect(n);
    std::vector<bool> live(n, false);
    std::vector<std::vector<std::size_t>> back_in(n);
    auto leaves_to = [&](std::size_t k, uint64_t target) {
      Outside o = scan_outside(target, widest(r));
      for (uint64_t a : o.back_in) {
        const Block* in = cfg_.block_at(a);
        if (!in || in->start != a) o.live = true;  // back into the middle of a block: not followed
        else back_in[k].push_back(in - cfg_.blocks.data());
      }
      return o.live;
    };
    for (std::size_t k = 0; k < n; ++k) {
      const Block& b = cfg_.blocks[k];
      effect[k] = effect_on(b, widest(r));
      if (effect[k] != Effect::Through) {
        live[k] = effect[k] == Effect::Reads;
        continue;
      }
      if (!b.exits) continue;
      const Instruction& last = cfg_.instructions[b.first + b.count - 1];
      auto found = tables_.find(last.addr);  // cfg_.tables holds the same, by jump
      const JumpTable* table = found == tables_.end() ? nullptr : &found->second;
      if (last.flow == Flow::Return) {
        live[k] = (kReturned | kCalleeSaved) & bit;
      } else if (table) {  // a switch whose entries leave for the .cold part: followed there
        bool out = false;
        for (uint64_t target : table->targets)
          if (!inside(target)) out = out || leaves_to(k, target);
        live[k] = out;
      } else if (last.flow == Flow::IndirectBranch) {
        live[k] = (kArguments | kCalleeSaved) & bit;
      } else if (last.flow != Flow::Stop) {
        bool out = false;
        if (last.has_target && !inside(last.target)) out = out || leaves_to(k, last.target);
        if (last.falls_through() && !inside(last.end())) out = out || leaves_to(k, last.end());
        live[k] = out;
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t k = n; k-- > 0;) {
        if (live[k] || effect[k] != Effect::Through) continue;
        bool any = std::any_of(back_in[k].begin(), back_in[k].end(), [&](std::size_t j) { return live[j]; });
        for (uint64_t s : cfg_.blocks[k].successors) any = any || live[cfg_.block_at(s) - cfg_.blocks.data()];
        if (any) live[k] = true, changed = true;
      }
    }
    return live_[widest(r)] = std::move(live);
  }

  const RegisterUse& use_of(std::size_t i) {
    if (uses_.empty())
      for (const Instruction& in : cfg_.instructions) uses_.push_back(register_use(in));
    return uses_[i];
  }

  Status find_leaders() {
    const auto& ins = cfg_.instructions;
    leaders_.insert(cfg_.start);
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const Instruction& in = ins[i];
      if (in.has_target && in.flow != Flow::Call) {
        if (auto r = check_target(in.target, in.addr); !r) return r;
        if (inside(in.target)) leaders_.insert(in.target);
      }
      if (in.ends_block() && i + 1 < ins.size()) leaders_.insert(ins[i + 1].addr);
      if (i + 1 == ins.size() && in.flow == Flow::Next)
        return fail(fmt::format("falls off the end of the function at {:#x}", in.addr));
    }
    for (const JumpTable& t : cfg_.tables) leaders_.insert(t.targets.begin(), t.targets.end());
    return ok();
  }

  void add_successors(Block& b, const Instruction& last, bool has_next) {
    auto add = [&](uint64_t a) {
      if (inside(a)) b.successors.push_back(a);
      else b.exits = true;
    };
    switch (last.flow) {
      case Flow::CondBranch: add(last.target); has_next ? add(last.end()) : void(b.exits = true); break;
      case Flow::Branch: add(last.target); break;
      case Flow::IndirectBranch:
        b.exits = true;  // a pointer tail call, unless a table says otherwise
        for (const JumpTable& t : cfg_.tables)
          if (t.jump_addr == last.addr) b.exits = false, std::for_each(t.targets.begin(), t.targets.end(), add);
        break;
      case Flow::Return:
      case Flow::Stop: b.exits = true; break;
      default: has_next ? add(last.end()) : void(b.exits = true); break;  // a noreturn call may end it
    }
    std::sort(b.successors.begin(), b.successors.end());
    b.successors.erase(std::unique(b.successors.begin(), b.successors.end()), b.successors.end());
  }

  void make_blocks() {
    const auto& ins = cfg_.instructions;
    for (std::size_t i = 0; i < ins.size();) {
      Block b;
      b.start = ins[i].addr;
      b.first = i;
      std::size_t j = i;
      while (j + 1 < ins.size() && !ins[j].ends_block() && !leaders_.count(ins[j + 1].addr)) ++j;
      b.count = j - i + 1;
      b.end = ins[j].end();
      add_successors(b, ins[j], j + 1 < ins.size());
      cfg_.blocks.push_back(std::move(b));
      i = j + 1;
    }
  }

  FunctionCfg& cfg_;
  const ModuleImage& image_;
  std::map<uint64_t, std::size_t> index_;
  std::vector<std::size_t> jumps_;             // indirect jumps that are not pointer tail calls
  std::map<uint64_t, JumpTable> tables_;       // by jump address
  std::map<uint64_t, Dispatch> dispatch_;      // by jump address: how the facts resolved it
  std::map<uint64_t, std::string> unresolved_; // by jump address: why not
  std::vector<RegisterUse> uses_;              // per instruction, once asked for
  std::map<ZydisRegister, std::vector<bool>> live_;  // live_in's, for the final CFG
  std::set<uint64_t> leaders_;
};

}  // namespace

const Block* FunctionCfg::block_at(uint64_t addr) const {
  auto it = std::upper_bound(blocks.begin(), blocks.end(), addr,
                             [](uint64_t a, const Block& b) { return a < b.start; });
  if (it == blocks.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

Result<FunctionCfg> build_cfg(const elf::Function& function, const ModuleImage& image) {
  auto bytes = image.read(function.addr, function.size);
  if (!bytes) return fail(fmt::format("no code bytes at {:#x}", function.addr));
  auto decoded = decode_function(*bytes, function.addr);
  if (!decoded) return fail("data in code: " + decoded.error().message());
  FunctionCfg cfg;
  cfg.start = function.addr;
  cfg.end = function.addr + function.size;
  cfg.instructions = std::move(*decoded);
  if (auto r = CfgBuilder(cfg, image).build(); !r) return std::unexpected(r.error());
  return cfg;
}

std::string reason_kind(const std::string& message) {
  std::size_t end = std::min(message.find(" at 0x"), message.find(": "));
  return end == std::string::npos ? message : message.substr(0, end);
}

}  // namespace dyni::jit
