// Packing hot functions into one cache: addresses first (sizes are known
// before addresses), then redirects and patches, then bytes and checks; a
// function that fails them is dropped and the rest packed again.
#include "jit/code_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "jit/verifier.h"

namespace dyni::jit {
namespace {

constexpr int64_t kReach = INT32_MAX - (64ll << 20);  // keep a margin for the cache's own size
constexpr uint64_t kPageSize = 4096;

bool reachable(uint64_t from, uint64_t to) {
  int64_t d = static_cast<int64_t>(to - from);
  return d > -kReach && d < kReach;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

BranchWidth shortest(const CacheOptions& o) { return o.short_branches ? BranchWidth::Short : BranchWidth::Near; }

// Whether the copy of `f` runs other instructions than its original: its
// blocks moved or left behind, or a branch, call, fall-through past its end
// or rebuilt table entry leaving the function sent elsewhere (to another
// copy, past a PLT stub). Erring towards "differs" only patches more.
bool copy_differs(const HotCode& f, const Redirects& redirects) {
  const FunctionCfg& cfg = *f.cfg;
  if (f.layout.order.size() != cfg.blocks.size()) return true;
  for (std::size_t k = 0; k < f.layout.order.size(); ++k)
    if (f.layout.order[k] != k) return true;
  auto sent_elsewhere = [&](uint64_t to) { return (to < cfg.start || to >= cfg.end) && redirects(to) != to; };
  for (const Instruction& in : cfg.instructions) {
    if (in.has_target && sent_elsewhere(in.target)) return true;
    if (in.falls_through() && in.end() == cfg.end && sent_elsewhere(cfg.end)) return true;  // the emitter's added jmp
  }
  for (const JumpTable& t : cfg.tables)
    if (t.rebuildable && std::any_of(t.targets.begin(), t.targets.end(), sent_elsewhere)) return true;
  return false;
}

// The entry patch of every copy, or why it has none.
void plan_patches(const std::vector<HotCode>& functions, const CacheOptions& options, CodeCache& cache) {
  for (std::size_t i = 0; i < functions.size(); ++i) {
    const HotCode& f = functions[i];
    CachedFunction& copy = cache.functions[i];
    auto patch = f.shares_entry_bytes ? fail(fmt::format("another entry point in the entry bytes at {:#x}", f.cfg->start))
                 : !options.counting && options.entries == EntryPolicy::WhenTheCopyDiffers && !copy_differs(f, cache.redirects)
                     ? fail(fmt::format("the copy runs what the original runs at {:#x}", f.cfg->start))
                     : plan_patch(*f.cfg, copy.code.base, options.probe_safe_entries);
    if (patch) copy.patch = std::move(*patch);
    else copy.unpatched = patch.error().message();
  }
}

// A counting copy calls the other hot functions through their original
// entries (PLT stubs bypassed to them, not to their copies): once those are
// pointed at the optimized copies, a thread that never leaves a counting
// copy (a connection's loop) calls optimized code from then on. Only a copy
// whose entry is not patched is called directly.
void call_through_entries(CodeCache& cache) {
  std::map<uint64_t, uint64_t> original_of;  // copy → original entry, for the patched ones
  for (const CachedFunction& f : cache.functions)
    if (!f.patch.entries.empty()) original_of[f.code.base] = f.original_entry;
  for (auto it = cache.redirects.to.begin(); it != cache.redirects.to.end();) {
    auto original = original_of.find(it->second);
    if (original == original_of.end()) ++it;
    else if (original->second == it->first) it = cache.redirects.to.erase(it);  // a call to the function itself
    else it->second = original->second, ++it;                                   // a PLT stub: to the entry
  }
}

// Addresses, redirects and entry patches of `functions` packed from `base`;
// the bytes are padding until emitted.
CodeCache pack(const std::vector<HotCode>& functions, uint64_t base, const Redirects& plt, const CacheOptions& options) {
  CodeCache cache;
  cache.base = base;
  uint64_t at = base;
  std::set<uint64_t> packed;
  for (const HotCode& f : functions) packed.insert(f.cfg->start);
  for (const HotCode& f : functions) {
    at = align_up(at, std::max(options.function_alignment, kFunctionAlignment));
    cache.redirects.to[f.cfg->start] = at;
    cache.functions.push_back({f.cfg->start, {at, {}, {}, 0, {}, {}, {}, 0, 0, {}}, {f.cfg->start, {}}, "", {}, {}, {}});
    CachedFunction& copy = cache.functions.back();
    if (options.promote_calls && !options.counting)
      for (const auto& [call, target] : f.promotions)
        if (packed.count(target)) copy.promoted.emplace(call, target);
    if (options.counting) {
      copy.counters = plan_counters(*f.cfg, cache.counter_slots, options.counter_stripes > 0, options.counter_set,
                                    options.count_values);
      cache.counter_slots += slots_of(copy.counters);
    }
    at += emitted_size(*f.cfg, f.layout, at, shortest(options), {options.counting ? &copy.counters : nullptr, 0},
                       copy.promoted);
  }
  if (cache.counter_slots) {
    cache.counters_base = options.counters_base ? options.counters_base : align_up(at, kPageSize);
    if (options.counter_stripes) cache.counter_stripes = stripes_for(cache.counter_slots, options.counter_stripes);
  }
  for (const auto& [stub, callee] : plt.to) {
    auto copy = cache.redirects.to.find(callee);
    uint64_t to = copy != cache.redirects.to.end() ? copy->second : callee;
    if (reachable(base, to) && reachable(at, to)) cache.redirects.to.emplace(stub, to);
  }
  plan_patches(functions, options, cache);
  if (options.counting && !options.counting_calls_copies) call_through_entries(cache);
  cache.bytes.assign(at - base, kPadding);
  return cache;
}

PatchedBytes patched_bytes(const CodeCache& cache) {
  PatchedBytes out;
  for (const CachedFunction& f : cache.functions)
    for (const EntryPatch& p : f.patch.entries) {
      out[p.addr] = changed_end(p);
      if (p.pad) out[p.pad] = p.pad + kEntryPatchSize;
    }
  return out;
}

// Emits (and verifies) function `f` into its slot; the reason when it fails.
Status emit_into(CodeCache& cache, CachedFunction& slot, const HotCode& f, const PatchedBytes& patched,
                 const CacheOptions& options) {
  const CounterLayout layout = cache.counter_layout();
  CounterPlacement counting{options.counting ? &slot.counters : nullptr, cache.counters_base + layout.slot_offset(0),
                            layout.striped() ? cache.counters_base : 0};
  auto code = emit_function(*f.cfg, f.layout, slot.code.base, cache.redirects, shortest(options), counting, slot.promoted);
  if (!code) return fail("copy cannot be emitted: " + code.error().message());
  // Its slot was sized by the plan.
  if (code->bytes.size() != emitted_size(*f.cfg, f.layout, slot.code.base, shortest(options), counting, slot.promoted))
    return fail("copy cannot be emitted: its size differs from its plan");
  if (options.verify)
    if (auto checked = jit::verify(*f.cfg, *code, cache.redirects, patched); !checked)
      return fail("copy fails verification: " + checked.error().message());
  std::copy(code->bytes.begin(), code->bytes.end(), cache.bytes.begin() + (code->base - cache.base));
  slot.code = std::move(*code);
  return ok();
}

// Where the entry patch of `cfg` lands in its copy `code`: on what the copy
// runs where the original would run the patched instruction, after its
// kept ones (patch_plan.h). Checked on the translation (I6): the copy must
// begin with the kept instructions' copies and go straight on to the
// patched one's (its copy, a jcc inverted by the layout, a promoted call,
// or its block counter); or, where that is a jmp the layout dropped, to its
// target's (padding before a loop top there is nops: the dropped jmp runs
// into it). Else the entry is left unpatched.
Result<uint64_t> landing(const FunctionCfg& cfg, const EmittedCode& code) {
  auto spot = entry_spot(cfg);
  if (!spot) return std::unexpected(spot.error());
  const std::size_t m = spot->kept, first = cfg.blocks[0].first;  // entry_spot counts in the entry block
  if (m == 0) return code.base;
  const std::vector<TranslationEntry>& t = code.translation;
  if (t.size() <= m || t[0].new_addr != code.base)
    return fail(fmt::format("the copy does not begin with the kept instructions at {:#x}", cfg.start));
  for (std::size_t i = 0; i < m; ++i)
    if (t[i].original_addr != cfg.instructions[first + i].addr || t[i].kind != Translation::Copied)
      return fail(fmt::format("the copy does not begin with the kept instructions at {:#x}", cfg.start));
  const Instruction& patched = cfg.instructions[first + m];
  const Translation k = t[m].kind;
  const bool runs_it = t[m].original_addr == patched.addr && k != Translation::Jump && k != Translation::Padding &&
                       k != Translation::EdgeCounter;
  const bool jumped = patched.flow == Flow::Branch && patched.has_target && t[m].original_addr == patched.target &&
                      k != Translation::Jump && k != Translation::EdgeCounter;
  if (!runs_it && !jumped) return fail(fmt::format("the copy does not go on to the instruction at {:#x}", patched.addr));
  return t[m].new_addr;
}

// Each entry patch's jmp re-aimed at its landing, once the copies are emitted.
void aim_patches(CodeCache& cache, const std::vector<HotCode>& functions) {
  for (std::size_t i = 0; i < functions.size(); ++i) {
    CachedFunction& copy = cache.functions[i];
    if (copy.patch.entries.empty()) continue;
    auto to = landing(*functions[i].cfg, copy.code);
    Status aimed = to ? aim_entry_patch(copy.patch.entries[0], *to) : std::unexpected(to.error());
    if (aimed) continue;
    copy.patch.entries.clear();
    copy.unpatched = aimed.error().message();
  }
}

}  // namespace

std::vector<TranslationEntry> CodeCache::translation() const {
  std::vector<TranslationEntry> all;
  for (const CachedFunction& f : functions) all.insert(all.end(), f.code.translation.begin(), f.code.translation.end());
  return all;
}

std::vector<uint8_t> CodeCache::loaded_at(uint64_t bias) const {
  std::vector<uint8_t> out = bytes;
  for (const CachedFunction& f : functions)
    for (uint64_t slot : f.code.absolute_slots) {
      uint64_t value;
      std::memcpy(&value, out.data() + (slot - base), 8);
      value += bias;
      std::memcpy(out.data() + (slot - base), &value, 8);
    }
  return out;
}

Result<CodeCache> build_code_cache(const std::vector<HotCode>& functions, uint64_t base, const Redirects& plt,
                                   const CacheOptions& options) {
  std::vector<HotCode> kept;
  for (const HotCode& f : functions) {
    BlockLayout layout = options.counting ? original_layout(*f.cfg) : with_entry_bytes_copied(*f.cfg, f.layout);
    kept.push_back({f.cfg, std::move(layout), f.shares_entry_bytes, f.promotions});
  }
  std::vector<CacheRejection> rejected;
  // Each round drops at least one function, or ends.
  while (true) {
    CodeCache cache = pack(kept, base, plt, options);
    PatchedBytes patched = patched_bytes(cache);
    std::set<uint64_t> failed;
    for (std::size_t i = 0; i < kept.size(); ++i) {
      auto emitted = emit_into(cache, cache.functions[i], kept[i], patched, options);
      if (!emitted) {
        rejected.push_back({kept[i].cfg->start, emitted.error().message()});
        failed.insert(kept[i].cfg->start);
      }
    }
    if (failed.empty()) {
      aim_patches(cache, kept);
      cache.rejected = std::move(rejected);
      return cache;
    }
    std::erase_if(kept, [&](const HotCode& f) { return failed.count(f.cfg->start) > 0; });
  }
}

}  // namespace dyni::jit
