// Emitting: plan the pieces (lengths are known before addresses), assign
// addresses, then relocate each piece against the final addresses.
#include "jit/emitter.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "jit/decoder.h"
#include "jit/promotion.h"
#include "jit/relocator.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kJmpRel32 = 5;
constexpr uint64_t kNoBlock = UINT64_MAX;  // after the last block: nothing follows
constexpr uint8_t kTablePadding = 0xcc;    // int3 before a rebuilt table: never run
constexpr uint8_t kPaddingInt3 = 0xcc;     // padding no code runs into

struct Piece {
  Translation kind;
  const Instruction* in = nullptr;  // Copied / Inverted
  uint64_t continue_at = 0;         // Jump: the original address execution continues at
  std::size_t length = 0;
  bool dropped = false;             // a jmp made redundant by the layout: no bytes
  const JumpTable* table = nullptr; // Copied: a load that reads its rebuilt table
  BranchWidth width = BranchWidth::Near;  // a jmp/jcc whose target's copy is within rel8 reach: Short
  const CounterSite* counter = nullptr;   // BlockCounter / EdgeCounter / ValueCounter (`in`: its call)
  uint64_t promote_to = 0;                // Promoted: the target whose copy it calls
  bool stub = false;                      // Promoted: the stub after the code (`in`: its call)
  bool nops = false;                      // Padding: the code before runs into it (else int3s)
};

// Where an image lands: a dropped jmp's copy is where its target's copy
// follows, past the padding before that target (a loop top).
uint64_t image_offset(const std::vector<Piece>& pieces, std::size_t i, uint64_t at) {
  if (!pieces[i].dropped) return at;
  for (std::size_t k = i + 1; k < pieces.size() && pieces[k].kind == Translation::Padding; ++k) at += pieces[k].length;
  return at;
}

// The code before piece `i` runs into it. Only what is proven not to (an
// added jmp, a ret, a jmp or an indirect jmp copied) lets padding be int3s.
bool runs_into(const std::vector<Piece>& pieces, std::size_t i) {
  if (i == 0) return true;
  const Piece& p = pieces[i - 1];
  if (p.dropped) return true;  // its target follows
  if (p.kind == Translation::Jump) return false;
  if (p.kind == Translation::Copied) return p.in->falls_through();
  return true;
}

// Padding that puts `addr` on an `alignment` boundary: at most
// kMaxLoopPadding bytes, else to the next 16-byte boundary.
uint64_t padding_length(uint64_t addr, unsigned alignment) {
  uint64_t pad = (alignment - addr % alignment) % alignment;
  return pad <= kMaxLoopPadding ? pad : (16 - addr % 16) % 16;
}

// The nops of `length` bytes of executed padding, one Padding entry each.
std::vector<uint64_t> nop_lengths(uint64_t length) {
  std::vector<uint64_t> out;
  for (; length > 0; length -= out.back()) out.push_back(std::min(length, kLongestNop));
  return out;
}

Result<std::vector<uint8_t>> padding_bytes(const Piece& p) {
  if (!p.nops) return std::vector<uint8_t>(p.length, kPaddingInt3);
  std::vector<uint8_t> out(p.length);
  uint64_t at = 0;
  for (uint64_t n : nop_lengths(p.length)) {
    if (ZYAN_FAILED(ZydisEncoderNopFill(out.data() + at, n))) return fail("emitter: no nop of that length");
    at += n;
  }
  return out;
}

// The original instruction a piece is the image of, as a branch target: a
// block counter or value code stands for the instruction it runs before.
// Jumps and edge counters stand for none.
std::optional<uint64_t> image_of(const Piece& p) {
  if (p.kind == Translation::BlockCounter || p.kind == Translation::ValueCounter) return p.counter->before;
  if (p.kind == Translation::EdgeCounter || p.stub) return std::nullopt;
  if (p.in) return p.in->addr;
  return std::nullopt;
}

// A displacement that needs 32 bits: the length of a rebuilt table's load.
constexpr int32_t kFarDisplacement = 0x40000000;

std::size_t table_load_length(const Instruction& in) {
  auto bytes = with_displacement(in, kFarDisplacement);
  return bytes ? bytes->size() : 0;  // 0: not re-encodable, the table is not rebuilt
}

uint64_t align_to(uint64_t a, unsigned n) { return (a + n - 1) / n * n; }

// Loads of one original table with one bound share one rebuilt table (an
// interpreter duplicates its dispatch into every handler: 200 loads of one
// 256-entry table).
using TableKey = std::tuple<uint64_t, unsigned, std::size_t>;
TableKey key_of(const JumpTable& t) { return {t.table_addr, t.entry_size, t.targets.size()}; }

// Where each distinct rebuilt table goes, from `at` (the end of the code) on;
// returns the end of the last.
uint64_t place_tables(const std::vector<Piece>& pieces, uint64_t at, std::map<TableKey, uint64_t>& table_at) {
  for (const Piece& p : pieces)
    if (p.table && !table_at.count(key_of(*p.table))) {
      at = align_to(at, p.table->entry_size);
      table_at[key_of(*p.table)] = at;
      at += p.table->entry_size * p.table->targets.size();
    }
  return at;
}

// A load without base register ([X*8 + T], a position-dependent
// executable's) holds the rebuilt table's absolute address in a signed
// 32-bit displacement: only a copy whose tables lie below 2 GiB can use
// one (a function and its tables never span 64 MiB). Decided from the
// copy's base, so that the size planned and the bytes emitted agree.
constexpr uint64_t kBaseLessLimit = (uint64_t{1} << 31) - (uint64_t{64} << 20);

class Planner {
 public:
  Planner(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base, BranchWidth shortest,
          const CounterPlacement& counting, const Promotions& promoted)
      : cfg_(cfg), layout_(layout), base_(base), shortest_(shortest), promoted_(promoted) {
    for (std::size_t i = 0; i < cfg.blocks.size(); ++i) block_index_[cfg.blocks[i].start] = i;
    if (counting.sites)
      for (const CounterSite& c : *counting.sites) {
        if (c.kind == CounterKind::Block) block_counter_[c.before] = &c;
        else if (c.kind == CounterKind::Value) value_counter_[c.at] = &c;
        else edge_counter_[c.at] = &c;
      }
  }

  std::vector<Piece> plan() {
    std::vector<Piece> pieces;
    for (std::size_t k = 0; k < layout_.order.size(); ++k) {
      const Block& b = cfg_.blocks[layout_.order[k]];
      if (k > 0 && loop_top(layout_.order[k])) pieces.push_back({Translation::Padding, nullptr, b.start, 0});
      uint64_t next = k + 1 < layout_.order.size() ? cfg_.blocks[layout_.order[k + 1]].start : kNoBlock;
      for (std::size_t i = b.first; i + 1 < b.first + b.count; ++i) {
        add_counters_before(cfg_.instructions[i], pieces);
        pieces.push_back(copied_or_promoted(cfg_.instructions[i]));
      }
      add_counters_before(cfg_.instructions[b.first + b.count - 1], pieces);
      plan_block_end(cfg_.instructions[b.first + b.count - 1], next, pieces);
    }
    add_stubs(pieces);
    if (shortest_ == BranchWidth::Short) shorten_branches(pieces);
    else pad(pieces);
    return pieces;
  }

  // Each promoted call's stub, after the code, in their order.
  static void add_stubs(std::vector<Piece>& pieces) {
    std::vector<Piece> stubs;
    for (const Piece& p : pieces)
      if (p.kind == Translation::Promoted) {
        Piece stub{Translation::Promoted, p.in, 0, kStubLength};
        stub.stub = true;
        stubs.push_back(stub);
      }
    pieces.insert(pieces.end(), stubs.begin(), stubs.end());
  }

 private:
  // The original address a jmp/jcc piece goes to when that is inside the
  // function (its copy may then be near), else none.
  std::optional<uint64_t> internal_destination(const Piece& p) const {
    uint64_t to = 0;
    if (p.counter || p.kind == Translation::Padding) return std::nullopt;
    if (p.kind == Translation::Jump) to = p.continue_at;
    else if (p.kind == Translation::Inverted) to = p.in->end();
    else if (!p.dropped && !p.table && p.in->has_target && can_be_short(*p.in)) to = p.in->target;
    else return std::nullopt;
    if (to < cfg_.start || to >= cfg_.end) return std::nullopt;
    return to;
  }

  // Branches inside the copy take the 2-byte rel8 form when their target's
  // copy is within reach (emit_function aims them as it does: the copy of
  // the target, where a dropped jmp's copy is where its target's follows).
  // All start short; each out of reach is widened to rel32, until none is.
  // Padding changes with the offsets, but each branch widens at most once,
  // so the loop still ends; its last round padded and measured with the
  // final widths.
  void shorten_branches(std::vector<Piece>& pieces) const {
    std::vector<std::optional<uint64_t>> to(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if ((to[i] = internal_destination(pieces[i]))) set_width(pieces[i], BranchWidth::Short);
    for (bool widened = true; widened;) {
      widened = false;
      pad(pieces);
      std::map<uint64_t, uint64_t> copy_at;  // original instruction → its copy's offset
      std::vector<uint64_t> at(pieces.size());
      uint64_t offset = 0;
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        at[i] = offset;
        if (auto original = image_of(pieces[i])) copy_at.emplace(*original, image_offset(pieces, i, offset));
        offset += pieces[i].length;
      }
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].width != BranchWidth::Short) continue;
        auto target = copy_at.find(*to[i]);  // none: a block left in the original code
        if (target == copy_at.end() || !fits_rel8(at[i] + pieces[i].length, target->second))
          set_width(pieces[i], BranchWidth::Near), widened = true;
      }
    }
  }

  bool loop_top(std::size_t block) const {
    return layout_.loop_alignment && block < layout_.loop_top.size() && layout_.loop_top[block];
  }

  // Each loop top's padding for the offsets the pieces have now, from the
  // copy's link-time base (the load bias is a multiple of a page, so the
  // boundaries hold at run time).
  void pad(std::vector<Piece>& pieces) const {
    uint64_t offset = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].kind == Translation::Padding) {
        pieces[i].nops = runs_into(pieces, i);
        pieces[i].length = padding_length(base_ + offset, layout_.loop_alignment);
      }
      offset += pieces[i].length;
    }
  }

  static void set_width(Piece& p, BranchWidth width) {
    p.width = width;
    p.length = p.kind == Translation::Jump ? (width == BranchWidth::Short ? 2 : kJmpRel32)
                                           : relocated_length(*p.in, width);
  }

  Piece copied(const Instruction& in) const {
    const bool base_less = in.memory() && in.memory()->base == ZYDIS_REGISTER_NONE;
    for (const JumpTable& t : cfg_.tables)
      if (t.rebuildable && t.load_addr == in.addr && (!base_less || base_ < kBaseLessLimit))
        if (std::size_t length = table_load_length(in)) return {Translation::Copied, &in, 0, length, false, &t};
    return {Translation::Copied, &in, 0, relocated_length(in)};
  }
  static Piece jump(uint64_t to) { return {Translation::Jump, nullptr, to, kJmpRel32}; }

  // An indirect call to promote (promotion.h) whose code can be made, else the copy.
  Piece copied_or_promoted(const Instruction& in) const {
    auto to = promoted_.find(in.addr);
    if (to == promoted_.end() || in.flow != Flow::IndirectCall) return copied(in);
    auto length = promoted_length(in);
    if (!length) return copied(in);
    Piece p{Translation::Promoted, &in, 0, *length};
    p.promote_to = to->second;
    return p;
  }

  static Piece counter(const CounterSite& c, const Instruction* call = nullptr) {
    Translation kind = c.kind == CounterKind::Block ? Translation::BlockCounter
                       : c.kind == CounterKind::Value ? Translation::ValueCounter
                                                      : Translation::EdgeCounter;
    Piece p{kind, call, 0, counter_length(c.form())};
    p.counter = &c;
    return p;
  }

  // A block's counter, then value code, before `in`.
  void add_counters_before(const Instruction& in, std::vector<Piece>& out) const {
    if (auto it = block_counter_.find(in.addr); it != block_counter_.end()) out.push_back(counter(*it->second));
    if (auto it = value_counter_.find(in.addr); it != value_counter_.end()) out.push_back(counter(*it->second, &in));
  }

  const CounterSite* edge_counter_of(const Instruction& in) const {
    auto it = edge_counter_.find(in.addr);
    return it == edge_counter_.end() ? nullptr : it->second;
  }

  bool copied_block_at(uint64_t addr) const {
    auto it = block_index_.find(addr);
    return it != block_index_.end() && layout_.copied[it->second];
  }

  // The last instruction of a block decides how the layout is bridged:
  // a jmp to the next block is dropped; a jcc whose target is the next block
  // is inverted; a broken fall-through gets a jmp.
  // Invariant: a copy never runs past its end. Every instruction that can
  // fall through is followed by the image of its successor or by a jmp to
  // it, also when that successor lies past the function's end (a last jcc or
  // call falls into whatever follows the function: the copy goes there
  // explicitly, not into the next function of the cache).
  void plan_block_end(const Instruction& last, uint64_t next, std::vector<Piece>& out) const {
    bool internal = last.has_target && last.target >= cfg_.start && last.target < cfg_.end;
    bool target_next = internal && next == last.target && copied_block_at(last.target);
    // A block that is only a jmp keeps it, so every copied block has a copy.
    bool alone = &last == &cfg_.instructions[cfg_.block_at(last.addr)->first];
    if (last.flow == Flow::Branch && target_next && !alone) {
      out.push_back({Translation::Copied, &last, 0, 0, true});
      return;
    }
    uint64_t fall = last.end();
    bool has_fall = last.falls_through();
    const CounterSite* edge = edge_counter_of(last);
    // Only a jcc has an opposite (xbegin, loop*, jrcxz keep their sense).
    // A counted fall-through is never inverted: its counter follows the branch.
    if (jcc_condition(last) && target_next && next != fall && !edge) {
      out.push_back({Translation::Inverted, &last, 0, relocated_length(last)});
      return;
    }
    out.push_back(copied_or_promoted(last));
    if (edge) out.push_back(counter(*edge));
    if (has_fall && next != fall) out.push_back(jump(fall));
  }

  const FunctionCfg& cfg_;
  const BlockLayout& layout_;
  const uint64_t base_;
  const BranchWidth shortest_;
  const Promotions& promoted_;
  std::map<uint64_t, std::size_t> block_index_;
  std::map<uint64_t, const CounterSite*> block_counter_;  // by the instruction it runs before
  std::map<uint64_t, const CounterSite*> edge_counter_;   // by its conditional branch
  std::map<uint64_t, const CounterSite*> value_counter_;  // by its indirect call or jmp
};

// An added jmp: rel32, or rel8 (EB) when the planner found its target near.
Result<std::vector<uint8_t>> jmp_to(uint64_t at, uint64_t to, BranchWidth width) {
  if (width == BranchWidth::Short) return short_branch(at, to, std::nullopt);
  int64_t delta = static_cast<int64_t>(to - (at + kJmpRel32));
  if (delta < INT32_MIN || delta > INT32_MAX) return fail(fmt::format("jump beyond ±2 GB at {:#x}", at));
  std::vector<uint8_t> out = {0xe9, 0, 0, 0, 0};
  int32_t d = static_cast<int32_t>(delta);
  std::memcpy(out.data() + 1, &d, 4);
  return out;
}

// The copy of a table's load, reading the rebuilt table at `rebuilt`: the
// same instruction with its displacement moved by rebuilt - original (the
// base register still holds the original table's address).
// For a load without base register the displacement is the table's
// address itself (a position-dependent executable's: cfg.cpp), and moves the same way.
Result<std::vector<uint8_t>> rebuilt_table_load(const Instruction& load, std::size_t planned, uint64_t original,
                                                uint64_t rebuilt) {
  int64_t disp = static_cast<int64_t>(rebuilt - original) + load.memory()->disp;
  if (disp < INT32_MIN || disp > INT32_MAX)
    return fail(fmt::format("rebuilt jump table beyond ±2 GB of its original at {:#x}", load.addr));
  auto bytes = with_displacement(load, static_cast<int32_t>(disp));
  if (bytes && bytes->size() != planned)
    return fail(fmt::format("rebuilt jump table too near its original at {:#x}", load.addr));
  return bytes;
}

// Appends the entry for `t`'s last target: relative to the original table
// (4 bytes), or absolute (8 bytes, a slot the injector relocates).
Status append_entry(EmittedCode& code, const RebuiltTable& t) {
  uint64_t target = t.targets.back();
  if (t.entry_size == 8) {
    code.absolute_slots.push_back(code.base + code.bytes.size());
    const auto* raw = reinterpret_cast<const uint8_t*>(&target);
    code.bytes.insert(code.bytes.end(), raw, raw + 8);
    return ok();
  }
  int64_t entry = static_cast<int64_t>(target - t.original);
  if (entry < INT32_MIN || entry > INT32_MAX) return fail("rebuilt jump table entry beyond ±2 GB");
  int32_t e = static_cast<int32_t>(entry);
  const auto* raw = reinterpret_cast<const uint8_t*>(&e);
  code.bytes.insert(code.bytes.end(), raw, raw + 4);
  return ok();
}

// Where each promoted call's literal goes, from `at` (after the tables);
// returns the end of the last.
uint64_t place_literals(const std::vector<Piece>& pieces, uint64_t at, std::vector<uint64_t>& literal_at) {
  for (const Piece& p : pieces)
    if (p.kind == Translation::Promoted && !p.stub) at = align_to(at, 8), literal_at.push_back(at), at += 8;
  return at;
}

void append_u64(std::vector<uint8_t>& out, uint64_t v) {
  const auto* raw = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), raw, raw + 8);
}

}  // namespace

uint64_t emitted_size(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base, BranchWidth shortest,
                      const CounterPlacement& counting, const Promotions& promoted) {
  uint64_t n = 0;
  std::vector<Piece> pieces = Planner(cfg, layout, base, shortest, counting, promoted).plan();
  for (const Piece& p : pieces) n += p.length;
  std::map<TableKey, uint64_t> table_at;
  std::vector<uint64_t> literal_at;
  return place_literals(pieces, place_tables(pieces, n, table_at), literal_at);
}

Result<EmittedCode> emit_function(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base,
                                  const Redirects& redirects, BranchWidth shortest, const CounterPlacement& counting,
                                  const Promotions& promoted) {
  std::vector<Piece> pieces = Planner(cfg, layout, base, shortest, counting, promoted).plan();
  std::map<uint64_t, uint64_t> copy_of;  // original instruction → its copy (a block counter before it)
  std::map<uint64_t, uint64_t> stub_at;  // promoted call → its stub
  uint64_t at = base;
  EmittedCode code{base, {}, {}, 0, {}, {}, {}, counting.slots_base, counting.table, {}};
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (auto original = image_of(p)) copy_of.emplace(*original, image_offset(pieces, i, at));
    if (p.kind == Translation::Padding) {
      uint64_t offset = 0;
      for (uint64_t n : p.nops ? nop_lengths(p.length) : std::vector<uint64_t>{p.length})
        if (n) code.translation.push_back({at + offset, p.continue_at, p.kind}), offset += n;
    } else if (p.counter) {
      uint64_t original = p.kind == Translation::EdgeCounter ? p.counter->at : p.counter->before;
      for (const CounterStep& s : counter_steps(p.counter->form(), p.in))
        code.translation.push_back({at + s.offset, original, p.kind, s.stack_shift});
    } else if (p.kind == Translation::Promoted && p.stub) {
      stub_at[p.in->addr] = at;
      for (uint64_t offset : {uint64_t{0}, uint64_t{kStubCallLength}}) code.translation.push_back({at + offset, p.in->addr, p.kind});
    } else if (p.kind == Translation::Promoted) {
      for (uint8_t offset : promoted_offsets(*p.in)) code.translation.push_back({at + offset, p.in->addr, p.kind});
    } else if (!p.dropped) {
      code.translation.push_back({at, p.in ? p.in->addr : p.continue_at, p.kind});
    }
    at += p.length;
  }
  // Inside the function: the copy, else the original instruction; outside: the redirect.
  auto image = [&](uint64_t target) {
    if (target < cfg.start || target >= cfg.end) return redirects(target);
    auto it = copy_of.find(target);
    return it == copy_of.end() ? target : it->second;
  };
  code.code_size = at - base;
  std::map<TableKey, uint64_t> table_at;  // rebuilt tables, in load order
  std::vector<uint64_t> literal_at;        // promoted calls' literals, in their order
  place_literals(pieces, place_tables(pieces, at, table_at), literal_at);
  std::size_t promoted_index = 0;
  uint64_t here = base;
  for (const Piece& p : pieces) {
    if (p.dropped) continue;
    Result<std::vector<uint8_t>> bytes;
    if (p.kind == Translation::Padding) {
      bytes = padding_bytes(p);
    } else if (p.counter) {
      uint64_t slot = counting.slots_base + kCounterSlotSize * p.counter->slot;
      auto c = counter_code(here, slot, p.counter->form(), counting.table, p.in);
      if (!c) return std::unexpected(c.error());
      bytes = std::move(c->bytes);
      code.counters.push_back({here, slot, *p.counter});
    } else if (p.kind == Translation::Promoted && p.stub) {
      bytes = promoted_stub(here, image(p.in->end()));
    } else if (p.kind == Translation::Promoted) {
      const uint64_t literal = literal_at[promoted_index++], copy = redirects(p.promote_to);
      // Invariant: a promoted call calls a copy (the cache's packer keeps
      // only targets it holds).
      if (copy == p.promote_to) return fail(fmt::format("promoted call to {:#x}, which has no copy", p.promote_to));
      bytes = promoted_code(*p.in, here, copy, literal, stub_at.at(p.in->addr));
      code.promoted.push_back({here, p.in->addr, literal, p.promote_to, copy, stub_at.at(p.in->addr)});
    } else if (p.table) {
      bytes = rebuilt_table_load(*p.in, p.length, p.table->table_addr, table_at[key_of(*p.table)]);
    } else if (p.kind == Translation::Jump) {
      bytes = jmp_to(here, image(p.continue_at), p.width);
    } else if (p.kind == Translation::Inverted) {
      bytes = relocate_inverted(*p.in, here, image(p.in->end()), p.width);
    } else {
      std::optional<uint64_t> target;
      if (p.in->has_target) target = image(p.in->target);
      bytes = relocate(*p.in, here, target, p.width);
    }
    if (!bytes) return std::unexpected(bytes.error());
    // Invariant: every piece is as long as planned (the translation's
    // addresses, the tables' places and emitted_size rest on it).
    if (bytes->size() != p.length)
      return fail(fmt::format("emitter: {:#x} planned {} bytes, made {}", here, p.length, bytes->size()));
    code.bytes.insert(code.bytes.end(), bytes->begin(), bytes->end());
    here += p.length;
  }
  for (const Piece& p : pieces) {
    if (!p.table) continue;
    RebuiltTable t{p.table->table_addr, table_at[key_of(*p.table)], p.in->addr, p.table->entry_size, {}};
    const bool first = t.addr >= base + code.bytes.size();  // else an earlier load's, already written
    if (first) code.bytes.resize(t.addr - base, kTablePadding);
    for (uint64_t target : p.table->targets) {
      // An absolute entry may be a pointer the code keeps (cfg.cpp,
      // entry_used_only_by_jump): one that leaves the function keeps its
      // original value, not a redirect to the copy of what it reaches.
      bool keep = p.table->entry_size == 8 && (target < cfg.start || target >= cfg.end);
      t.targets.push_back(keep ? target : image(target));
      if (!first) continue;
      if (auto r = append_entry(code, t); !r) return fail(fmt::format("{} at {:#x}", r.error().message(), p.in->addr));
    }
    code.tables.push_back(std::move(t));
  }
  for (const PromotedCall& c : code.promoted) {
    code.bytes.resize(c.literal - base, kTablePadding);
    code.absolute_slots.push_back(c.literal);
    append_u64(code.bytes, c.target);
  }
  return code;
}

Result<EmittedCode> emit_in_order(const FunctionCfg& cfg, uint64_t base) {
  return emit_function(cfg, original_layout(cfg), base);
}

}  // namespace dyni::jit
