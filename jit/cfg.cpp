// Building a function's CFG: leaders, blocks, successors, jump tables.
#include "jit/cfg.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "jit/decoder.h"
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
  // PIC only: the base register, the lea that sets it, the add, and the
  // register the entry is loaded into (and the jump goes through).
  ZydisRegister base = ZYDIS_REGISTER_NONE;
  std::size_t lea_at = 0, add_at = 0;
  ZydisRegister index_target = ZYDIS_REGISTER_NONE;
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
  return TablePattern{ins[*lea].rip_address, 4, widest(ins[*load].ops[1].index), *load, base, *lea, *add, j};
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

Result<JumpTable> resolve_table(const std::vector<Instruction>& ins, std::size_t jmp,
                                const ModuleImage& image, std::optional<TablePattern>& matched) {
  auto pattern = match_pic_table(ins, jmp);
  if (!pattern) pattern = match_absolute_table(ins, jmp);
  matched = pattern;
  if (!pattern) return fail(fmt::format("indirect jump unresolved at {:#x}", ins[jmp].addr));
  auto entries = find_bound(ins, pattern->load_at, pattern->index);
  if (!entries || *entries == 0 || *entries > kMaxTableEntries)
    return fail(fmt::format("jump table without a provable bound at {:#x}", ins[jmp].addr));
  auto bytes = image.read(pattern->table, *entries * pattern->entry_size);
  if (!bytes) return fail(fmt::format("jump table unreadable at {:#x}", pattern->table));
  JumpTable t{ins[jmp].addr, pattern->table, pattern->entry_size, {}, ins[pattern->load_at].addr, false};
  for (uint64_t k = 0; k < *entries; ++k) {
    if (pattern->entry_size == 4) {
      int32_t rel;
      std::memcpy(&rel, bytes->data() + 4 * k, 4);
      t.targets.push_back(pattern->table + static_cast<uint64_t>(static_cast<int64_t>(rel)));
    } else {
      uint64_t abs;
      std::memcpy(&abs, bytes->data() + 8 * k, 8);
      t.targets.push_back(abs);
    }
  }
  return t;
}

class CfgBuilder {
 public:
  CfgBuilder(FunctionCfg& cfg, const ModuleImage& image) : cfg_(cfg), image_(image) {
    for (std::size_t i = 0; i < cfg_.instructions.size(); ++i) index_[cfg_.instructions[i].addr] = i;
  }

  Status build() {
    for (const Instruction& in : cfg_.instructions)
      if (auto r = check_relocatable(in); !r) return r;
    if (auto r = check_references(); !r) return r;
    if (auto r = resolve_tables(); !r) return r;
    if (auto r = find_leaders(); !r) return r;
    make_blocks();
    mark_rebuildable();
    return ok();
  }

 private:
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

  Status resolve_tables() {
    const auto& ins = cfg_.instructions;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      if (ins[i].flow != Flow::IndirectBranch) continue;
      std::optional<TablePattern> pattern;
      auto table = resolve_table(ins, i, image_, pattern);
      if (!table && is_pointer_tail_call(ins, i)) continue;  // leaves the function
      if (!table) return std::unexpected(table.error());
      // Entries may leave the function for other code (gcc's .cold parts):
      // those are exits. Inside, they must be instruction boundaries.
      for (uint64_t target : table->targets) {
        if (inside(target) && !index_.count(target))
          return fail(fmt::format("jump table entry inside an instruction at {:#x}", ins[i].addr));
        if (!inside(target) && !image_.is_code(target))
          return fail(fmt::format("jump table entry outside the code at {:#x}", ins[i].addr));
      }
      patterns_[ins[i].addr] = *pattern;
      cfg_.tables.push_back(std::move(*table));
    }
    return ok();
  }

  // Rebuilding a PIC table is sound only when the copy's load can read no
  // entry but these: the table's base is this table's on every path to the
  // load, and the index is bounded by a guard no path avoids. Proven here
  // for the forms compilers emit most:
  //   P: ... cmp R, imm ; ja/jae default     (falls through into D)
  //   or ... cmp R, imm ; jbe/jb D            (branches to D)
  //   D: ... lea B,[rip+T] ... movsxd J,[B+X*4] ... add J,B ... jmp J
  // every way into D being such a guard with the table's bound, X holding
  // the compared value (zero-extended when 32 bits were compared), B and J
  // written by nothing else in between (hidden writes included), all of it
  // in D.
  void mark_rebuildable() {
    for (JumpTable& t : cfg_.tables) {
      auto p = patterns_.find(t.jump_addr);
      if (t.entry_size == 4 && p != patterns_.end()) t.rebuildable = rebuildable_pic_table(t, p->second);
    }
  }

  bool rebuildable_pic_table(const JumpTable& t, const TablePattern& p) const {
    const auto& ins = cfg_.instructions;
    const std::size_t jmp = index_.at(t.jump_addr);
    const Block* d = cfg_.block_at(t.jump_addr);
    if (!d || d->start == cfg_.start || ins[p.lea_at].addr < d->start) return false;
    if (!(p.lea_at < p.load_at && p.load_at < p.add_at && p.add_at < jmp)) return false;
    for (std::size_t i = p.lea_at + 1; i < p.add_at; ++i)
      if (may_write_gpr(ins[i], p.base)) return false;
    for (std::size_t i = p.load_at + 1; i < jmp; ++i)
      if (i != p.add_at && may_write_gpr(ins[i], p.index_target)) return false;
    std::vector<const Block*> ways = ways_into(*d);
    if (ways.empty()) return false;
    for (const Block* g : ways)
      if (!guards(*g, *d, t.targets.size(), p)) return false;
    return true;
  }

  // Every block with an edge into `d`; none when a table or the function's
  // entry leads there too.
  std::vector<const Block*> ways_into(const Block& d) const {
    std::vector<const Block*> ways;
    for (const Block& b : cfg_.blocks)
      if (std::find(b.successors.begin(), b.successors.end(), d.start) != b.successors.end()) ways.push_back(&b);
    for (const JumpTable& other : cfg_.tables)
      if (std::find(other.targets.begin(), other.targets.end(), d.start) != other.targets.end()) return {};
    return ways;
  }

  // `g` ends in `cmp R, imm; jcc` that lets only indices below `entries`
  // into `d`, and the load's index holds R's value there.
  bool guards(const Block& g, const Block& d, uint64_t entries, const TablePattern& p) const {
    const auto& ins = cfg_.instructions;
    if (g.count < 2) return false;
    const std::size_t jcc = g.first + g.count - 1, cmp = jcc - 1;
    const Instruction& j = ins[jcc];
    const Instruction& c = ins[cmp];
    bool falls_in = (j.mnemonic == ZYDIS_MNEMONIC_JNBE || j.mnemonic == ZYDIS_MNEMONIC_JNB) && g.end == d.start &&
                    j.target != d.start;
    bool branches_in = (j.mnemonic == ZYDIS_MNEMONIC_JBE || j.mnemonic == ZYDIS_MNEMONIC_JB) &&
                       j.target == d.start && g.end != d.start;
    if (!falls_in && !branches_in) return false;
    if (c.mnemonic != ZYDIS_MNEMONIC_CMP || c.ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
        c.ops[1].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || bound_of(j.mnemonic, c.ops[1].imm) != entries)
      return false;
    return index_is_compared_value(cmp, g, d, p.load_at, p.index);
  }

  // Whether the load's index X holds the value `cmp` compared, with bits
  // 32-63 zero when only 32 bits were compared, followed forward through
  // register moves from the cmp to the end of its block `g`, then from the
  // start of `d` to the load.
  bool index_is_compared_value(std::size_t cmp, const Block& g, const Block& d, std::size_t load,
                               ZydisRegister index) const {
    const auto& ins = cfg_.instructions;
    const Operand& compared = ins[cmp].ops[0];
    if (compared.size != 64 && compared.size != 32) return false;
    ZydisRegister holder = widest(compared.reg);
    bool full = compared.size == 64 || zero_extended_before(cmp, holder, g);
    auto follow = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i) {
        const Instruction& in = ins[i];
        bool from_holder = in.mnemonic == ZYDIS_MNEMONIC_MOV && in.ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                           in.ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER && widest(in.ops[1].reg) == holder &&
                           in.ops[0].size == in.ops[1].size && in.ops[0].size >= compared.size;
        if (from_holder) {
          holder = widest(in.ops[0].reg);
          full = full || in.ops[0].size == 32;  // a 32-bit write zero-extends
        } else if (may_write_gpr(in, holder)) {
          return false;
        }
      }
      return true;
    };
    return follow(cmp + 1, g.first + g.count) && follow(d.first, load) && full && holder == index;
  }

  // The last write to `r` before the cmp is an explicit 32-bit one (any
  // 32-bit write zero-extends to 64 bits): searched back through the guard
  // block `g`, then through blocks that are each the only way into the next.
  bool zero_extended_before(std::size_t cmp, ZydisRegister r, const Block& g) const {
    const auto& ins = cfg_.instructions;
    const Block* b = &g;
    std::size_t end = cmp;
    for (int hops = 0; hops < 8; ++hops) {
      for (std::size_t i = end; i-- > b->first;) {
        if (!may_write_gpr(ins[i], r)) continue;
        return writes_register(ins[i], r) && ins[i].ops[0].size == 32;
      }
      std::vector<const Block*> ways = b->start == cfg_.start ? std::vector<const Block*>{} : ways_into(*b);
      if (ways.size() != 1) return false;
      b = ways[0];
      end = b->first + b->count;
    }
    return false;
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
  std::map<uint64_t, TablePattern> patterns_;  // by jump address
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
