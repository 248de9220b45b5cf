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

Result<JumpTable> resolve_table(const std::vector<Instruction>& ins, std::size_t jmp,
                                const ModuleImage& image) {
  auto pattern = match_pic_table(ins, jmp);
  if (!pattern) pattern = match_absolute_table(ins, jmp);
  if (!pattern) return fail(fmt::format("indirect jump unresolved at {:#x}", ins[jmp].addr));
  auto entries = find_bound(ins, pattern->load_at, pattern->index);
  if (!entries || *entries == 0 || *entries > kMaxTableEntries)
    return fail(fmt::format("jump table without a provable bound at {:#x}", ins[jmp].addr));
  auto bytes = image.read(pattern->table, *entries * pattern->entry_size);
  if (!bytes) return fail(fmt::format("jump table unreadable at {:#x}", pattern->table));
  JumpTable t{ins[jmp].addr, pattern->table, pattern->entry_size, {}};
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
      auto table = resolve_table(ins, i, image_);
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
      cfg_.tables.push_back(std::move(*table));
    }
    return ok();
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
