// Decode-back checks of emitted code against its translation table.
#include "jit/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "jit/call_target.h"
#include "jit/decoder.h"
#include "jit/flags_liveness.h"
#include "jit/patch_plan.h"
#include "jit/promotion.h"
#include "jit/relocator.h"

namespace dyni::jit {
namespace {

// The bytes of `a` and `b` agree outside a's displacement and relative immediate.
bool same_bytes_outside_pc_fields(const Instruction& a, const Instruction& b) {
  if (a.length != b.length) return false;
  for (std::size_t i = 0; i < a.length; ++i) {
    bool in_disp = a.rip_relative && i >= a.disp.offset && i < a.disp.offset + 4u;
    bool in_imm = a.has_target && i >= a.imm.offset &&
                  i < a.imm.offset + a.imm.size / 8u;
    if (!in_disp && !in_imm && a.bytes[i] != b.bytes[i]) return false;
  }
  return true;
}

class Verifier {
 public:
  Verifier(const FunctionCfg& cfg, const EmittedCode& code, const Redirects& redirects, const PatchedBytes& patched)
      : cfg_(cfg), code_(code), redirects_(redirects), patched_(patched), own_patch_(patch_address(cfg)) {
    for (const Instruction& in : cfg.instructions) original_[in.addr] = &in;
    // The first cache instruction standing for an original is its image (a
    // block counter before the copy of the instruction).
    for (const TranslationEntry& t : code.translation)
      if (t.kind != Translation::Jump && t.kind != Translation::EdgeCounter && t.kind != Translation::Padding)
        copy_of_.emplace(t.original_addr, t.new_addr);
    for (const EmittedCounter& c : code.counters) counter_at_[c.addr] = &c;
    find_dropped();
  }

  Status run() {
    if (code_.translation.empty() || code_.translation.front().original_addr != cfg_.start ||
        code_.translation.front().new_addr != code_.base)
      return fail("verifier: the code does not begin with the function's entry");
    for (std::size_t k = 0; k < code_.translation.size();) {
      if (code_.translation[k].kind == Translation::Promoted && verified_stubs_.count(code_.translation[k].new_addr)) {
        k += 2;  // a stub, checked with its promoted call
        continue;
      }
      if (code_.translation[k].kind == Translation::Promoted) {
        auto steps = check_promoted(k);
        if (!steps) return std::unexpected(steps.error());
        k += *steps;
        continue;
      }
      if (code_.translation[k].kind == Translation::Padding) {
        if (auto r = check_padding(k); !r) return r;
        ++k;
        continue;
      }
      if (is_counter(code_.translation[k].kind)) {
        auto steps = check_counter(k);
        if (!steps) return std::unexpected(steps.error());
        k += *steps;
        continue;
      }
      if (auto r = check(k); !r) return r;
      ++k;
    }
    if (auto r = check_every_counter_placed(); !r) return r;
    if (auto r = check_table_exits(); !r) return r;
    if (auto r = check_absolute_slots(); !r) return r;
    return check_dropped();
  }

 private:
  bool inside(uint64_t a) const { return a >= cfg_.start && a < cfg_.end; }

  uint64_t image(uint64_t target) const {
    if (!inside(target)) return redirects_(target);
    auto it = copy_of_.find(continues_at(target));
    return it == copy_of_.end() ? target : it->second;
  }

  // Where execution goes on from original address `a`, skipping dropped jmps.
  uint64_t continues_at(uint64_t a) const {
    for (int hops = 0; hops < 64; ++hops) {
      auto it = original_.find(a);
      if (it == original_.end() || !dropped_.count(a)) return a;
      a = it->second->target;
    }
    return a;
  }

  uint64_t end_of(std::size_t k) const {
    return k + 1 < code_.translation.size() ? code_.translation[k + 1].new_addr : code_end();
  }

  uint64_t code_end() const { return code_.base + code_.code_size; }

  const RebuiltTable* rebuilt_for(uint64_t load) const {
    for (const RebuiltTable& t : code_.tables)
      if (t.load == load) return &t;
    return nullptr;
  }

  Result<Instruction> decode_at(uint64_t at, uint64_t end) const {
    if (at < code_.base || end > code_end() || end <= at)
      return fail(fmt::format("verifier: bad extent at {:#x}", at));
    return decode_one(std::span(code_.bytes.data() + (at - code_.base), end - at), at);
  }

  // The next cache instruction must stand for original address `want`
  // (after the counter of a conditional branch's fall-through, if any).
  Status check_continues(std::size_t k, uint64_t want) const {
    want = continues_at(want);
    std::size_t next = k + 1;
    while (next < code_.translation.size() && code_.translation[next].kind == Translation::EdgeCounter &&
           code_.translation[next].original_addr == code_.translation[k].original_addr)
      ++next;
    if (next >= code_.translation.size())
      return fail(fmt::format("verifier: {:#x} can run past the end of the copy", code_.translation[k].new_addr));
    if (code_.translation[next].original_addr != want)
      return fail(fmt::format("verifier: {:#x} does not continue at the image of {:#x}",
                              code_.translation[k].new_addr, want));
    return ok();
  }

  Status check(std::size_t k) const {
    const TranslationEntry& t = code_.translation[k];
    uint64_t next = end_of(k);
    if (t.kind == Translation::Jump) return check_jump(t, next);
    auto orig = original_.find(t.original_addr);
    if (orig == original_.end()) return fail(fmt::format("verifier: no original for {:#x}", t.new_addr));
    const Instruction& o = *orig->second;
    if (const RebuiltTable* table = rebuilt_for(o.addr)) {
      if (auto r = check_rebuilt_load(t, o, next, *table); !r) return r;
      return o.falls_through() ? check_continues(k, o.end()) : ok();  // jmp [table]: the load is the jump
    }
    // A jmp/jcc may have either form; the decode below checks its target.
    bool short_form = can_be_short(o) && next - t.new_addr == relocated_length(o, BranchWidth::Short);
    if (next - t.new_addr != relocated_length(o) && !short_form)
      return fail(fmt::format("verifier: {:#x} has the wrong length", t.new_addr));
    if (auto r = check_instruction(t, o, next); !r) return r;
    if (t.kind == Translation::Inverted) return check_continues(k, o.target);
    if (o.falls_through()) return check_continues(k, o.end());  // past the function's end too
    return ok();
  }

  // Whether the code of entry `k` can run on into entry k + 1: all but an
  // added jmp, a copied instruction that never falls through, and int3s.
  bool runs_on(std::size_t k) const {
    const TranslationEntry& t = code_.translation[k];
    if (t.kind == Translation::Jump) return false;
    if (t.kind == Translation::Padding) return code_.bytes[t.new_addr - code_.base] != 0xcc;
    if (t.kind != Translation::Copied) return true;
    auto o = original_.find(t.original_addr);
    return o == original_.end() || o->second->falls_through();
  }

  // Padding before a loop top (emitter.h): one nop that runs on into the
  // image of its original, or int3s that nothing runs into (no branch lands
  // on padding: copy_of_ leaves it out).
  Status check_padding(std::size_t k) const {
    const TranslationEntry& t = code_.translation[k];
    const uint64_t next = end_of(k);
    if (next <= t.new_addr || next > code_end()) return fail(fmt::format("verifier: bad padding at {:#x}", t.new_addr));
    const uint8_t* bytes = code_.bytes.data() + (t.new_addr - code_.base);
    if (std::all_of(bytes, bytes + (next - t.new_addr), [](uint8_t b) { return b == 0xcc; })) {
      if (k == 0 || runs_on(k - 1)) return fail(fmt::format("verifier: int3 padding at {:#x} can be run", t.new_addr));
    } else {
      auto d = decode_at(t.new_addr, next);
      if (!d || d->mnemonic != ZYDIS_MNEMONIC_NOP || d->length != next - t.new_addr)
        return fail(fmt::format("verifier: padding at {:#x} is not one nop", t.new_addr));
    }
    return check_continues(k, t.original_addr);
  }

  Status check_jump(const TranslationEntry& t, uint64_t next) const {
    auto d = decode_at(t.new_addr, next);
    if (!d || d->mnemonic != ZYDIS_MNEMONIC_JMP || !d->has_target ||
        d->target != image(continues_at(t.original_addr)))
      return fail(fmt::format("verifier: added jmp at {:#x} misses the image of {:#x}", t.new_addr,
                              t.original_addr));
    return check_exit(d->target, t.new_addr);
  }

  // An exit to `target` from cache address `from` must not land in patched
  // bytes. Landing on a patch's first byte runs its jmp to that function's
  // copy entry: the same as going on there only when the copy has those
  // bytes, which this check proves for this function on its own exits and
  // for any other on that function's copy.
  Status check_exit(uint64_t target, uint64_t from) const {
    auto it = patched_.upper_bound(target);
    if (it == patched_.begin()) return ok();
    --it;
    if (target >= it->second) return ok();
    bool own = it->first == own_patch_;
    if (target == it->first && (!own || copy_of_.count(target))) return ok();
    return fail(fmt::format("verifier: exit at {:#x} lands in patched bytes at {:#x}", from, target));
  }

  // The injector adds the load bias to every absolute slot: each must be an
  // entry of a rebuilt 8-byte table or a promoted call's literal, and
  // nothing else.
  Status check_absolute_slots() const {
    for (uint64_t slot : code_.absolute_slots) {
      bool entry = std::any_of(code_.tables.begin(), code_.tables.end(), [&](const RebuiltTable& t) {
        return t.entry_size == 8 && slot >= t.addr && slot < t.addr + 8 * t.targets.size() && (slot - t.addr) % 8 == 0;
      });
      entry |= verified_literals_.count(slot) > 0;  // compared with by a promoted call checked above
      if (!entry) return fail(fmt::format("verifier: absolute slot at {:#x} is no rebuilt table's entry", slot));
    }
    return ok();
  }

  // A copied jmp through a jump table reads the original table, whose
  // entries are exits to the original code, or a rebuilt one, whose entries
  // are the images of the original's.
  Status check_table_exits() const {
    for (const JumpTable& t : cfg_.tables) {
      auto jmp = copy_of_.find(t.jump_addr);
      if (jmp == copy_of_.end()) continue;
      bool rebuilt = rebuilt_for(t.load_addr) != nullptr;
      for (uint64_t target : t.targets)
        if (auto r = check_exit(rebuilt ? entry_image(t, target) : target, jmp->second); !r) return r;
    }
    return ok();
  }

  // A rebuilt table's load: the original instruction with only its
  // displacement moved to the rebuilt table, which lies after the code and
  // holds, entry by entry, the image of the original's target: relative to
  // the original table (the base register's value), or absolute in a slot
  // the injector relocates.
  Status check_rebuilt_load(const TranslationEntry& t, const Instruction& o, uint64_t next,
                            const RebuiltTable& table) const {
    // Byte for byte the original re-encoded with the displacement moved to
    // the rebuilt table (same registers, segment, prefixes and width).
    auto d = decode_at(t.new_addr, next);
    const Operand* om = o.memory();
    int64_t disp = om ? om->disp + static_cast<int64_t>(table.addr - table.original) : INT64_MAX;
    auto want = disp >= INT32_MIN && disp <= INT32_MAX ? with_displacement(o, static_cast<int32_t>(disp))
                                                       : fail("beyond ±2 GB");
    bool same = d && want && d->length == next - t.new_addr && want->size() == d->length &&
                std::equal(want->begin(), want->end(), code_.bytes.begin() + (t.new_addr - code_.base));
    const Operand* dm = d ? d->memory() : nullptr;
    if (!same || !dm || !same_but_displacement(*d, o) || dm->disp != disp)
      return fail(fmt::format("verifier: {:#x} does not read the rebuilt table of {:#x}", t.new_addr, o.addr));
    const JumpTable* original = nullptr;
    for (const JumpTable& j : cfg_.tables)
      if (j.load_addr == o.addr && j.rebuildable) original = &j;
    const unsigned size = table.entry_size;
    if (!original || original->entry_size != size || original->table_addr != table.original ||
        table.addr < code_end() || table.addr % size ||
        table.addr + size * original->targets.size() > code_.base + code_.bytes.size())
      return fail(fmt::format("verifier: the rebuilt table of {:#x} is misplaced", o.addr));
    for (std::size_t k = 0; k < original->targets.size(); ++k)
      if (entry_at(table, k) != entry_image(*original, original->targets[k]))
        return fail(fmt::format("verifier: entry {} of the rebuilt table of {:#x} misses its image", k, o.addr));
    return ok();
  }

  // The decoded copy `d` is the original `o` but for the memory operand's
  // displacement: mnemonic, every operand (register, width, base, index,
  // scale) and the segment, compared field by field, not through the
  // encoder that made the copy.
  static bool same_but_displacement(const Instruction& d, const Instruction& o) {
    if (d.mnemonic != o.mnemonic || d.operand_count != o.operand_count) return false;
    if (d.segment_override() != o.segment_override()) return false;
    for (std::size_t k = 0; k < d.ops.size() && k < d.operand_count; ++k) {
      const Operand& a = d.ops[k];
      const Operand& b = o.ops[k];
      if (a.type != b.type || a.size != b.size || a.reg != b.reg || a.base != b.base || a.index != b.index ||
          a.scale != b.scale || a.actions != b.actions)
        return false;
    }
    return true;
  }

  // Where a rebuilt table's entry for `target` must send execution: the
  // image, except that an absolute entry leaving the function keeps its
  // original value (emitter.cpp).
  uint64_t entry_image(const JumpTable& t, uint64_t target) const {
    return t.entry_size == 8 && !inside(target) ? target : image(target);
  }

  // Entry `k` of a rebuilt table, as the address it sends execution to
  // (link-time; an absolute entry must be a slot the injector relocates).
  uint64_t entry_at(const RebuiltTable& table, std::size_t k) const {
    const uint8_t* at = code_.bytes.data() + (table.addr - code_.base) + table.entry_size * k;
    if (table.entry_size == 8) {
      const uint64_t slot = table.addr + 8 * k;
      if (!std::binary_search(code_.absolute_slots.begin(), code_.absolute_slots.end(), slot)) return 0;
      uint64_t entry;
      std::memcpy(&entry, at, 8);
      return entry;
    }
    int32_t entry;
    std::memcpy(&entry, at, 4);
    return table.original + static_cast<uint64_t>(static_cast<int64_t>(entry));
  }

  Status check_instruction(const TranslationEntry& t, const Instruction& o, uint64_t next) const {
    // An expanded rel8-only branch ends in the jmp rel32 that carries its target.
    bool expanded = is_rel8_only(o);
    auto d = decode_at(expanded ? next - 5 : t.new_addr, next);
    if (!d) return fail("verifier: " + d.error().message());
    if (t.kind == Translation::Inverted) {
      auto c = jcc_condition(o);
      if (!c || jcc_condition(*d) != (*c ^ 1) || !d->has_target || d->target != image(o.end()))
        return fail(fmt::format("verifier: inverted branch at {:#x} is wrong", t.new_addr));
      return check_exit(d->target, t.new_addr);
    }
    if (!expanded && d->mnemonic != o.mnemonic)
      return fail(fmt::format("verifier: {:#x} is not the instruction of {:#x}", t.new_addr, o.addr));
    if (!o.has_target && !o.rip_relative && !same_bytes_outside_pc_fields(o, *d))
      return fail(fmt::format("verifier: {:#x} changed bytes of {:#x}", t.new_addr, o.addr));
    if (o.rip_relative && (d->rip_address != o.rip_address || !same_bytes_outside_pc_fields(o, *d)))
      return fail(fmt::format("verifier: {:#x} no longer addresses {:#x}", t.new_addr, o.rip_address));
    if (o.has_target && (!d->has_target || d->target != image(o.target)))
      return fail(fmt::format("verifier: branch at {:#x} misses the image of {:#x}", t.new_addr, o.target));
    return o.has_target ? check_exit(d->target, t.new_addr) : ok();
  }

  // The counter code starting at entry `k`: exactly the code of its site
  // (counting.h), each instruction with its stack shift, incrementing its
  // slot outside the code, then going on where the site says. Returns how
  // many entries it spans.
  Result<std::size_t> check_counter(std::size_t k) const {
    const TranslationEntry& t = code_.translation[k];
    auto it = counter_at_.find(t.new_addr);
    if (it == counter_at_.end()) return fail(fmt::format("verifier: counter code at {:#x} has no site", t.new_addr));
    const EmittedCounter& c = *it->second;
    if (c.site.kind == CounterKind::Value) return check_value_code(k, c);
    const bool block = c.site.kind == CounterKind::Block;
    if (t.kind != (block ? Translation::BlockCounter : Translation::EdgeCounter) ||
        t.original_addr != (block ? c.site.before : c.site.at))
      return fail(fmt::format("verifier: counter code at {:#x} does not map to its site", t.new_addr));
    if (!block && (k == 0 || code_.translation[k - 1].kind != Translation::Copied ||
                   code_.translation[k - 1].original_addr != c.site.at || original_.at(c.site.at)->flow != Flow::CondBranch))
      return fail(fmt::format("verifier: fall-through counter at {:#x} does not follow its branch", t.new_addr));
    const bool slot_in_code = code_.counter_slots_base >= code_.base &&
                              code_.counter_slots_base < code_.base + code_.bytes.size();
    if (c.slot_addr != code_.counter_slots_base + kCounterSlotSize * c.site.slot || slot_in_code ||
        (c.slot_addr >= code_.base && c.slot_addr < code_.base + code_.bytes.size()))
      return fail(fmt::format("verifier: counter at {:#x} increments {:#x}, not its slot", t.new_addr, c.slot_addr));
    if (auto r = check_counter_site(c.site); !r)
      return fail(fmt::format("verifier: counter at {:#x}: {}", t.new_addr, r.error().message()));
    if (c.site.striped && (code_.counter_table == 0 || c.slot_addr < code_.counter_table + kStripeTableBytes ||
                           (code_.counter_table >= code_.base && code_.counter_table < code_.base + code_.bytes.size())))
      return fail(fmt::format("verifier: striped counter at {:#x} has no stripe table outside the code", t.new_addr));
    std::vector<CounterStep> steps = counter_steps(c.site.form());
    std::vector<Step> shape = counter_shape(c.site.form());
    if (shape.size() != steps.size()) return fail(fmt::format("verifier: counter code at {:#x} has a wrong shape", t.new_addr));
    int shift = 0;  // how far below the original's rsp is, from the shape alone (the unwind rows rest on it)
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const std::size_t e = k + s;
      if (e >= code_.translation.size()) return fail(fmt::format("verifier: counter code at {:#x} cut short", t.new_addr));
      const TranslationEntry& step = code_.translation[e];
      if (step.kind != t.kind || step.original_addr != t.original_addr || step.new_addr != t.new_addr + steps[s].offset ||
          step.stack_shift != shift)
        return fail(fmt::format("verifier: counter code at {:#x} has a wrong step", step.new_addr));
      shift += stack_effect(shape[s]);
      auto d = decode_at(step.new_addr, end_of(e));
      if (!d || d->length != end_of(e) - step.new_addr || !counter_step_is(*d, shape[s], c.slot_addr, code_.counter_table))
        return fail(fmt::format("verifier: {:#x} is not the counter code of its site", step.new_addr));
    }
    const std::size_t last = k + steps.size() - 1;
    if (auto r = check_continues(last, block ? c.site.before : original_.at(c.site.at)->end()); !r)
      return std::unexpected(r.error());
    return steps.size();
  }

  // A promoted call (promotion.h) at entry `k`, decoded back: it stands for
  // an indirect call (not a jmp) before which the flags are dead (computed
  // afresh); it loads the call's target into r11 as the call would, compares
  // it with an absolute slot after the code that holds link-time address V,
  // calls the image of V (a copy, not V) when equal, else goes to its stub
  // (after every piece of the function's code, both its entries the call's)
  // which calls r11; both go on at the image of the instruction after the
  // call. Returns how many entries it spans in line.
  Result<std::size_t> check_promoted(std::size_t k) const {
    const TranslationEntry& t = code_.translation[k];
    auto wrong = [&](const std::string& what) { return fail(fmt::format("verifier: promoted call at {:#x} {}", t.new_addr, what)); };
    auto orig = original_.find(t.original_addr);
    if (orig == original_.end() || orig->second->flow != Flow::IndirectCall || !target_loadable(*orig->second))
      return wrong("does not stand for an indirect call");
    const Instruction& call = *orig->second;
    if (k + kPromotedInstructions > code_.translation.size()) return wrong("is cut short");
    std::vector<Instruction> d;
    for (std::size_t s = 0; s < kPromotedInstructions; ++s) {
      const TranslationEntry& e = code_.translation[k + s];
      if (e.kind != Translation::Promoted || e.original_addr != call.addr || e.stack_shift != 0) return wrong("has a wrong step");
      auto one = decode_at(e.new_addr, end_of(k + s));
      if (!one || one->length != end_of(k + s) - e.new_addr || one->segment_override())
        return wrong(fmt::format("does not decode at {:#x}", e.new_addr));
      d.push_back(*one);
    }
    if (live_.empty()) live_ = live_flags_before(cfg_);
    const std::size_t index = static_cast<std::size_t>(&call - cfg_.instructions.data());
    if (live_[index] & kStatusFlags) return wrong("writes flags that are live");
    if (!loads_target_of(d[0], call, ZYDIS_REGISTER_R11, 0)) return wrong("does not load the call's target");
    const bool cmp = d[1].mnemonic == ZYDIS_MNEMONIC_CMP && d[1].operand_count == 2 &&
                     d[1].ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER && d[1].ops[0].reg == ZYDIS_REGISTER_R11 &&
                     d[1].rip_relative && d[1].ops[1].size == 64;
    const uint64_t literal = cmp ? d[1].rip_address : 0;
    const bool slot = std::count(code_.absolute_slots.begin(), code_.absolute_slots.end(), literal) == 1 &&
                      literal >= code_end() && literal + 8 <= code_.base + code_.bytes.size();
    if (!cmp || !slot) return wrong("does not compare with an absolute slot after the code");
    uint64_t target = 0;
    std::memcpy(&target, code_.bytes.data() + (literal - code_.base), 8);
    const uint64_t copy = redirects_(target);
    if (d[3].mnemonic != ZYDIS_MNEMONIC_CALL || !d[3].has_target || d[3].target != copy || copy == target)
      return wrong(fmt::format("does not call the copy of {:#x}", target));
    if (d[2].mnemonic != ZYDIS_MNEMONIC_JNZ || !d[2].has_target) return wrong("has no stub for other targets");
    if (auto stub = check_stub(d[2].target, call); !stub) return wrong(stub.error().message());
    if (auto r = check_continues(k + kPromotedInstructions - 1, call.end()); !r) return std::unexpected(r.error());
    verified_literals_.insert(literal);
    verified_stubs_.insert(d[2].target);
    return kPromotedInstructions;
  }

  // The stub at `at` of promoted call `call`: two entries of the call's,
  // after the last piece that is not a stub; call r11, then a jmp to the
  // image of the instruction after the call.
  Status check_stub(uint64_t at, const Instruction& call) const {
    auto first = std::find_if(code_.translation.begin(), code_.translation.end(),
                              [&](const TranslationEntry& e) { return e.new_addr == at; });
    if (first == code_.translation.end() || first + 1 == code_.translation.end())
      return fail(fmt::format("has no stub at {:#x}", at));
    const std::size_t s = static_cast<std::size_t>(first - code_.translation.begin());
    for (std::size_t e = s; e < code_.translation.size(); ++e)  // only stubs follow
      if (code_.translation[e].kind != Translation::Promoted)
        return fail(fmt::format("has a stub at {:#x} before the end of its copy", at));
    for (std::size_t e : {s, s + 1})
      if (code_.translation[e].original_addr != call.addr || code_.translation[e].stack_shift != 0)
        return fail(fmt::format("has a stub at {:#x} of another call", at));
    auto c = decode_at(at, end_of(s));
    auto j = decode_at(end_of(s), end_of(s + 1));
    if (!c || c->length != end_of(s) - at || c->mnemonic != ZYDIS_MNEMONIC_CALL ||
        c->ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER || c->ops[0].reg != ZYDIS_REGISTER_R11)
      return fail("does not call the loaded target otherwise");
    if (!j || j->length != end_of(s + 1) - end_of(s) || j->mnemonic != ZYDIS_MNEMONIC_JMP || !j->has_target ||
        j->target != image(call.end()))
      return fail("does not go on after its indirect call");
    return ok();
  }

  // Value code (counting.h) at entry `k`, checked for what safety needs
  // rather than byte by byte: it stands just before a countable indirect
  // call or jmp that is no jump table's; it saves rcx and rax (and the
  // flags where they are live, computed afresh) past the red zone and puts
  // them back in the reverse order; it loads what the call loads; between,
  // it touches rsp not at all, writes memory only in its table of
  // kValueSlots slots outside the code, and branches only within that part
  // or to its end; then it goes on at the call. Every step has the stack
  // shift the decoded pushes give. Returns how many entries it spans.
  Result<std::size_t> check_value_code(std::size_t k, const EmittedCounter& c) const {
    const TranslationEntry& t = code_.translation[k];
    auto wrong = [&](const std::string& what) { return fail(fmt::format("verifier: value code at {:#x} {}", t.new_addr, what)); };
    auto orig = original_.find(c.site.at);
    if (t.kind != Translation::ValueCounter || orig == original_.end() || t.original_addr != c.site.at ||
        c.site.before != c.site.at)
      return wrong("does not map to its site");
    const Instruction& call = *orig->second;
    const bool table_jump = std::any_of(cfg_.tables.begin(), cfg_.tables.end(),
                                        [&](const JumpTable& j) { return j.jump_addr == call.addr; });
    if (table_jump || !value_countable(call)) return wrong("is not before a countable indirect call or jmp");
    if (live_.empty()) live_ = live_flags_before(cfg_);
    const std::size_t index = static_cast<std::size_t>(&call - cfg_.instructions.data());  // original_ points into it
    if (!c.site.saves_flags && (live_[index] & kStatusFlags)) return wrong("writes flags that are live");
    const uint64_t table = c.slot_addr, table_end = table + kCounterSlotSize * kValueSlots;
    if (table != code_.counter_slots_base + kCounterSlotSize * c.site.slot ||
        (table < code_end() && table_end > code_.base))
      return wrong("counts in the code, not in its table");
    const std::vector<CounterStep> steps = counter_steps(c.site.form(), &call);
    if (steps.empty() || k + steps.size() > code_.translation.size()) return wrong("is cut short");
    // As long as its form says: turning it off jumps that far.
    if (end_of(k + steps.size() - 1) - t.new_addr != counter_length(c.site.form())) return wrong("has a wrong length");
    std::vector<Instruction> d;
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const TranslationEntry& step = code_.translation[k + s];
      if (step.kind != t.kind || step.original_addr != t.original_addr || step.new_addr != t.new_addr + steps[s].offset)
        return wrong("has a wrong step");
      auto one = decode_at(step.new_addr, end_of(k + s));
      if (!one || one->length != end_of(k + s) - step.new_addr || one->segment_override())
        return wrong(fmt::format("does not decode at {:#x}", step.new_addr));
      d.push_back(*one);
    }
    const std::vector<Step> head = c.site.saves_flags ? std::vector<Step>{Step::LowerRsp, Step::PushRcx, Step::PushRax, Step::Pushfq}
                                                      : std::vector<Step>{Step::LowerRsp, Step::PushRcx, Step::PushRax};
    const std::vector<Step> tail = c.site.saves_flags ? std::vector<Step>{Step::Popfq, Step::PopRax, Step::PopRcx, Step::RaiseRsp}
                                                      : std::vector<Step>{Step::PopRax, Step::PopRcx, Step::RaiseRsp};
    if (d.size() < head.size() + tail.size() + 2) return wrong("is too short");
    const std::size_t done = d.size() - tail.size();
    for (std::size_t s = 0; s < head.size(); ++s)
      if (!counter_step_is(d[s], head[s], 0, 0)) return wrong("does not save rcx, rax and the flags past the red zone");
    for (std::size_t s = 0; s < tail.size(); ++s)
      if (!counter_step_is(d[done + s], tail[s], 0, 0)) return wrong("does not restore what it saved");
    const unsigned shift = kRedZone + 8 * static_cast<unsigned>(head.size() - 1);
    std::size_t load = head.size(), lea = load + 1;
    if (lea < d.size() && d[lea].mnemonic == ZYDIS_MNEMONIC_NOP) ++lea;
    if (!loads_target_of(d[load], call, ZYDIS_REGISTER_RAX, shift)) return wrong("does not load the call's target");
    const bool lea_table = d[lea].mnemonic == ZYDIS_MNEMONIC_LEA && d[lea].operand_count == 2 &&
                           d[lea].ops[0].reg == ZYDIS_REGISTER_RCX && d[lea].rip_relative && d[lea].rip_address == table;
    if (!lea_table) return wrong("does not address its table");
    std::set<uint64_t> inner;  // where its branches may go: the counting part and its end
    for (std::size_t s = lea + 1; s <= done; ++s) inner.insert(d[s].addr);
    for (std::size_t s = lea + 1; s < done; ++s)
      if (!counts_in_table(d[s], inner)) return wrong(fmt::format("does more than count at {:#x}", d[s].addr));
    // The stack shift of every step, from the decoded pushes and pops.
    int depth = 0;
    for (std::size_t s = 0; s < d.size(); ++s) {
      if (code_.translation[k + s].stack_shift != depth) return wrong("has a wrong stack shift");
      if (s < head.size()) depth += s == 0 ? static_cast<int>(kRedZone) : 8;
      else if (s >= done) depth -= s + 1 == d.size() ? static_cast<int>(kRedZone) : 8;
    }
    if (auto r = check_continues(k + d.size() - 1, call.addr); !r) return std::unexpected(r.error());
    return d.size();
  }

  // One instruction of value code's counting part: a compare of rax or of
  // 0 with a slot of its table, a store of rax to one, an increment of one,
  // or a je or jmp forward within `inner` (no loop). [rcx + d], d within
  // the table.
  static bool counts_in_table(const Instruction& in, const std::set<uint64_t>& inner) {
    if (in.mnemonic == ZYDIS_MNEMONIC_JZ || in.mnemonic == ZYDIS_MNEMONIC_JMP)
      return in.has_target && in.length == 2 && in.target > in.addr && inner.count(in.target) > 0;
    const Operand* m = in.memory();
    const bool slot = m && m->base == ZYDIS_REGISTER_RCX && m->index == ZYDIS_REGISTER_NONE && m->size == 64 &&
                      m->disp >= 0 && m->disp < static_cast<int64_t>(kCounterSlotSize * kValueSlots) && m->disp % 8 == 0;
    const bool rex_only = std::all_of(in.bytes.begin(), in.bytes.begin() + std::min<std::size_t>(in.prefix_count, in.length),
                                      [](uint8_t b) { return (b & 0xf0) == 0x40; });
    if (!slot || !rex_only) return false;
    auto reg = [&](std::size_t k, ZydisRegister r) { return in.ops[k].type == ZYDIS_OPERAND_TYPE_REGISTER && in.ops[k].reg == r; };
    switch (in.mnemonic) {
      case ZYDIS_MNEMONIC_CMP:
        return in.operand_count == 2 && ((reg(0, ZYDIS_REGISTER_RAX) && in.ops[1].type == ZYDIS_OPERAND_TYPE_MEMORY) ||
                                         (in.ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY &&
                                          in.ops[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && in.ops[1].imm == 0));
      case ZYDIS_MNEMONIC_MOV:
        return in.operand_count == 2 && in.ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY && reg(1, ZYDIS_REGISTER_RAX);
      case ZYDIS_MNEMONIC_INC: return in.operand_count == 1 && in.ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY;
      default: return false;
    }
  }

  // The instructions of each counter form (counting.h), as the verifier
  // expects them: written out here, not taken from the code that makes them.
  enum class Step { LowerRsp, Pushfq, PushRax, PushRcx, Rdpid, Movzx, LeaTable, LoadStripe, IncStriped, IncShared,
                    PopRcx, PopRax, Popfq, RaiseRsp };
  static std::vector<Step> counter_shape(CounterForm form) {
    if (!form.saves_flags && !form.striped) return {Step::IncShared};
    std::vector<Step> out = {Step::LowerRsp};  // past the red zone
    if (form.saves_flags) out.push_back(Step::Pushfq);
    if (form.striped)
      out.insert(out.end(), {Step::PushRax, Step::PushRcx, Step::Rdpid, Step::Movzx, Step::LeaTable, Step::LoadStripe,
                             Step::IncStriped, Step::PopRcx, Step::PopRax});
    else
      out.push_back(Step::IncShared);
    if (form.saves_flags) out.push_back(Step::Popfq);
    out.push_back(Step::RaiseRsp);
    return out;
  }

  static int stack_effect(Step s) {
    switch (s) {
      case Step::LowerRsp: return kRedZone;
      case Step::RaiseRsp: return -static_cast<int>(kRedZone);
      case Step::Pushfq: case Step::PushRax: case Step::PushRcx: return 8;
      case Step::Popfq: case Step::PopRax: case Step::PopRcx: return -8;
      default: return 0;
    }
  }

  // Whether `d` is step `s` of counter code incrementing `slot` (striped:
  // stripe 0's, through the table at `table`). Decoded and compared operand
  // by operand, with no prefix but REX.
  static bool counter_step_is(const Instruction& d, Step s, uint64_t slot, uint64_t table) {
    if (d.segment_override()) return false;
    auto reg = [&](std::size_t k, ZydisRegister r) {
      return d.ops[k].type == ZYDIS_OPERAND_TYPE_REGISTER && d.ops[k].reg == r;
    };
    auto mem = [&](std::size_t k, ZydisRegister base, ZydisRegister index, uint8_t scale, int64_t disp) {
      const Operand& m = d.ops[k];
      return m.type == ZYDIS_OPERAND_TYPE_MEMORY && m.base == base && m.index == index &&
             (index == ZYDIS_REGISTER_NONE || m.scale == scale) && m.disp == disp;
    };
    auto is = [&](ZydisMnemonic m, uint8_t n) { return d.mnemonic == m && d.operand_count == n; };
    auto lea_rsp = [&](int64_t disp) {
      return is(ZYDIS_MNEMONIC_LEA, 2) && reg(0, ZYDIS_REGISTER_RSP) && mem(1, ZYDIS_REGISTER_RSP, ZYDIS_REGISTER_NONE, 0, disp);
    };
    switch (s) {
      case Step::LowerRsp: return lea_rsp(-static_cast<int64_t>(kRedZone));
      case Step::RaiseRsp: return lea_rsp(kRedZone);
      case Step::Pushfq: return d.mnemonic == ZYDIS_MNEMONIC_PUSHFQ && d.length == 1;
      case Step::Popfq: return d.mnemonic == ZYDIS_MNEMONIC_POPFQ && d.length == 1;
      case Step::PushRax: return is(ZYDIS_MNEMONIC_PUSH, 1) && reg(0, ZYDIS_REGISTER_RAX) && d.length == 1;
      case Step::PushRcx: return is(ZYDIS_MNEMONIC_PUSH, 1) && reg(0, ZYDIS_REGISTER_RCX) && d.length == 1;
      case Step::PopRcx: return is(ZYDIS_MNEMONIC_POP, 1) && reg(0, ZYDIS_REGISTER_RCX) && d.length == 1;
      case Step::PopRax: return is(ZYDIS_MNEMONIC_POP, 1) && reg(0, ZYDIS_REGISTER_RAX) && d.length == 1;
      case Step::Rdpid: return is(ZYDIS_MNEMONIC_RDPID, 1) && reg(0, ZYDIS_REGISTER_RAX);
      case Step::Movzx: return is(ZYDIS_MNEMONIC_MOVZX, 2) && reg(0, ZYDIS_REGISTER_EAX) && reg(1, ZYDIS_REGISTER_AL);
      case Step::LeaTable:
        return is(ZYDIS_MNEMONIC_LEA, 2) && reg(0, ZYDIS_REGISTER_RCX) && d.rip_relative && d.rip_address == table;
      case Step::LoadStripe:
        return is(ZYDIS_MNEMONIC_MOV, 2) && reg(0, ZYDIS_REGISTER_RAX) && d.ops[1].size == 64 &&
               mem(1, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RAX, 8, 0);
      case Step::IncStriped:
        return is(ZYDIS_MNEMONIC_INC, 1) && d.ops[0].size == 64 && d.bytes[0] == 0x48 &&
               mem(0, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RAX, 1, static_cast<int64_t>(slot - table));
      case Step::IncShared:
        // 48 ff 05 disp32: REX.W, no lock or other prefix.
        return is(ZYDIS_MNEMONIC_INC, 1) && d.rip_relative && d.rip_address == slot && d.ops[0].size == 64 &&
               d.length == 7 && d.bytes[0] == 0x48 && d.bytes[1] == 0xff && d.bytes[2] == 0x05;
    }
    return false;
  }

  // A site's place, decided again from the CFG: a block counter runs before
  // an instruction of its block, with no call before it in the block; the
  // plain form only where the flags it writes are dead (liveness computed
  // afresh, not taken from the planner).
  Status check_counter_site(const CounterSite& site) const {
    if (live_.empty()) live_ = live_flags_before(cfg_);
    auto index = [&](uint64_t addr) -> std::optional<std::size_t> {  // instructions are in address order
      auto it = std::lower_bound(cfg_.instructions.begin(), cfg_.instructions.end(), addr,
                                 [](const Instruction& in, uint64_t a) { return in.addr < a; });
      if (it == cfg_.instructions.end() || it->addr != addr) return std::nullopt;
      return static_cast<std::size_t>(it - cfg_.instructions.begin());
    };
    if (site.kind == CounterKind::FallThrough) {
      auto i = index(site.at);
      if (!i || cfg_.instructions[*i].flow != Flow::CondBranch) return fail("a fall-through site not at a branch");
      if (!site.saves_flags && (live_flags_at_next(cfg_, live_, *i) & kCounterClobbers)) return fail("flags live there");
      return ok();
    }
    const Block* b = cfg_.block_at(site.at);
    auto i = index(site.before);
    if (!b || b->start != site.at || !i || *i < b->first || *i >= b->first + b->count)
      return fail("a block counter outside its block");
    for (std::size_t k = b->first; k < *i; ++k)
      if (cfg_.instructions[k].flow == Flow::Call || cfg_.instructions[k].flow == Flow::IndirectCall)
        return fail("a block counter after a call");
    if (!site.saves_flags && (live_[*i] & kCounterClobbers)) return fail("flags live there");
    return ok();
  }

  // Every counter of the copy is in its translation, once.
  Status check_every_counter_placed() const {
    std::set<uint64_t> starts;
    for (std::size_t k = 0; k < code_.translation.size(); ++k)
      if (is_counter(code_.translation[k].kind) && code_.translation[k].stack_shift == 0)
        starts.insert(code_.translation[k].new_addr);
    for (const EmittedCounter& c : code_.counters)
      if (!starts.count(c.addr)) return fail(fmt::format("verifier: counter at {:#x} is not in the translation", c.addr));
    return ok();
  }

  // Original instructions missing from blocks that were copied: dropped jmps.
  void find_dropped() {
    for (const Block& b : cfg_.blocks) {
      bool any = false;
      for (std::size_t i = b.first; i < b.first + b.count; ++i) any |= copy_of_.count(cfg_.instructions[i].addr) > 0;
      if (!any) continue;
      for (std::size_t i = b.first; i < b.first + b.count; ++i)
        if (!copy_of_.count(cfg_.instructions[i].addr)) dropped_.insert(cfg_.instructions[i].addr);
    }
  }

  // Only a direct jmp to inside the function may be left out of a copied block.
  Status check_dropped() const {
    for (uint64_t a : dropped_) {
      const Instruction& in = *original_.at(a);
      if (in.flow != Flow::Branch || !inside(in.target))
        return fail(fmt::format("verifier: {:#x} is missing from the cache", a));
    }
    return ok();
  }

  const FunctionCfg& cfg_;
  const EmittedCode& code_;
  const Redirects& redirects_;
  const PatchedBytes& patched_;
  const uint64_t own_patch_;  // patch_address(cfg_), once: it scans the function
  std::map<uint64_t, const Instruction*> original_;
  std::map<uint64_t, uint64_t> copy_of_;
  std::map<uint64_t, const EmittedCounter*> counter_at_;
  mutable std::vector<uint16_t> live_;  // status flags live before each instruction, once a counter asks
  mutable std::set<uint64_t> verified_literals_;  // the absolute slots promoted calls were checked to compare with
  mutable std::set<uint64_t> verified_stubs_;     // the stubs checked with their promoted calls
  std::set<uint64_t> dropped_;
};

}  // namespace

Status verify(const FunctionCfg& original, const EmittedCode& code, const Redirects& redirects,
              const PatchedBytes& patched) {
  return Verifier(original, code, redirects, patched).run();
}

}  // namespace dyni::jit
