// optimize_module: the phases of pipeline.h in order, each one call deep.
#include "jit/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "elf/usdt.h"
#include "jit/block_profile.h"
#include "jit/edge_profile.h"
#include "jit/entry_branches.h"
#include "jit/entry_pads.h"
#include "jit/function_order.h"
#include "jit/patch_plan.h"
#include "jit/promotion.h"
#include "jit/return_address.h"

namespace dyni::jit {
namespace {

const SiteCounts* counts_of(const ModuleInput& in, uint64_t addr) {
  if (!in.counts) return nullptr;
  auto it = in.counts->functions.find(addr);
  return it == in.counts->functions.end() ? nullptr : &it->second;
}

const FunctionSamples* samples_of(const ModuleInput& in, uint64_t addr) {
  if (!in.profile) return nullptr;
  auto it = in.profile->functions.find(addr);
  return it == in.profile->functions.end() ? nullptr : &it->second;
}

// The function's own FDE, read into rows; none when it has no FDE of its own.
Result<std::optional<std::vector<elf::CfiRow>>> unwind_of(const ModuleInput& in,
                                                          const std::map<uint64_t, elf::Fde>& fdes,
                                                          const FunctionCfg& cfg) {
  auto fde = fdes.find(cfg.start);
  if (fde == fdes.end()) return std::nullopt;
  if (fde->second.end < cfg.end) return fail(fmt::format("unwind info does not cover the function at {:#x}", cfg.start));
  auto rows = elf::cfi_rows(in.eh_frame, fde->second);
  if (!rows) return fail(fmt::format("unwind info unreadable at {:#x}: {}", cfg.start, rows.error().message()));
  return std::optional(std::move(*rows));
}

std::map<uint64_t, elf::Fde> fdes_of(const ModuleInput& in) {
  std::map<uint64_t, elf::Fde> out;
  if (in.eh_frame.empty()) return out;
  auto fdes = elf::parse_eh_frame(in.eh_frame, in.eh_frame_addr);
  if (fdes)
    for (const elf::Fde& f : *fdes) out.emplace(f.begin, f);
  return out;
}

// Where code may be entered from outside: function starts and FDE starts.
// An entry patch must not cover another one (it would land mid-jmp).
std::set<uint64_t> entry_points(const ModuleInput& in, const std::map<uint64_t, elf::Fde>& fdes) {
  std::set<uint64_t> out;
  for (const elf::Function& f : in.functions->functions()) out.insert(f.addr);
  for (const auto& [begin, fde] : fdes) out.insert(begin);
  return out;
}


// Step 1: analyse, keeping the functions that are fully understood
// (including their unwind info, which their copies will need).
// The first USDT probe site in `f`, as a reason to keep it in the original code; "" if none.
std::string probe_in(const ModuleInput& in, const elf::Function& f) {
  auto site = in.probe_sites.lower_bound(f.addr);
  if (site == in.probe_sites.end() || site->first >= f.addr + std::max<uint64_t>(f.size, 1)) return "";
  return fmt::format("{} at {:#x}: {} (a tracer's uprobe there fires only in the original code)", kHoldsProbeSite,
                     site->first, site->second);
}

// Why policy keeps `f` in the original code before it is decoded, or "".
std::string kept_by_policy(const ModuleInput& in, const elf::Function& f, const JitOptions& options) {
  if (auto kept = in.kept_in_place.find(f.addr); kept != in.kept_in_place.end())
    return fmt::format("{}: {}", kKeptInPlace, kept->second);
  return options.copy_probe_functions ? "" : probe_in(in, f);
}

// The first system call `cfg` makes, as a reason to keep it in place; "" if none.
std::string system_call_in(const FunctionCfg& cfg) {
  for (const Instruction& i : cfg.instructions)
    if (i.mnemonic == ZYDIS_MNEMONIC_SYSCALL || i.mnemonic == ZYDIS_MNEMONIC_SYSENTER || i.mnemonic == ZYDIS_MNEMONIC_INT ||
        i.mnemonic == ZYDIS_MNEMONIC_INT1 || i.mnemonic == ZYDIS_MNEMONIC_INTO)
      return fmt::format("{} at {:#x} (a system library's system call sites stay in place)", kMakesSystemCall, i.addr);
  return "";
}

// The first call `cfg` makes, as a reason to keep it in place; "" if none.
std::string call_in(const FunctionCfg& cfg) {
  for (const Instruction& i : cfg.instructions)
    if (i.flow == Flow::Call || i.flow == Flow::IndirectCall)
      return fmt::format("{} at {:#x} (no unwinder is loaded to know its copy's frame: only leaves are copied)",
                         kNotALeaf, i.addr);
  return "";
}

// `cfg`'s pad (entry_pads.h), where it has a short-jump spot and one: set
// before anything asks for its entry_spot.
void find_entry_pad(const EntryPads* pads, FunctionCfg& cfg) {
  if (!pads) return;
  if (auto spot = short_jump_spot(cfg))
    if (auto pad = pads->pad_for(cfg, *spot)) cfg.entry_pad = *pad;
}

void analyse(const ModuleInput& in, const std::map<uint64_t, elf::Fde>& fdes, const JitOptions& options,
             ModulePlan& plan) {
  std::set<uint64_t> entries = entry_points(in, fdes);
  std::optional<EntryPads> pads;
  if (options.cache.entry_pads && !in.patchable_function_entries) pads.emplace(in.functions->functions(), *in.image);
  std::set<uint64_t> seen;
  for (uint64_t addr : in.hot) {
    if (!seen.insert(addr).second) continue;
    const FunctionSamples* s = samples_of(in, addr);
    uint64_t samples = s ? s->samples : 0;
    plan.hot_samples += samples;
    const elf::Function* f = in.functions->find(addr);
    const bool starts = f && f->addr == addr;
    if (std::string kept = starts ? kept_by_policy(in, *f, options) : ""; !kept.empty()) {
      plan.rejected.push_back({addr, elf::display_name(*f), kept, samples});
      continue;
    }
    Result<FunctionCfg> cfg = starts ? build_cfg(*f, *in.image)
                                                   : fail(fmt::format("no function starts at {:#x}", addr));
    std::string kept = cfg && in.keep_system_call_functions ? system_call_in(*cfg) : "";
    if (kept.empty() && cfg && in.only_leaves) kept = call_in(*cfg);
    if (!kept.empty()) {
      plan.rejected.push_back({addr, elf::display_name(*f), kept, samples});
      continue;
    }
    Result<std::optional<std::vector<elf::CfiRow>>> unwind = cfg ? unwind_of(in, fdes, *cfg) : std::nullopt;
    if (!cfg || !unwind) {
      plan.rejected.push_back({addr, f ? elf::display_name(*f) : "", (!cfg ? cfg.error() : unwind.error()).message(),
                               samples});
      continue;
    }
    if (*unwind) plan.original_unwind[addr] = std::move(**unwind);
    find_entry_pad(pads ? &*pads : nullptr, *cfg);
    auto next_entry = entries.upper_bound(addr);
    if (next_entry != entries.end() && *next_entry < patch_address(*cfg) + kEntryPatchSize) plan.shares_entry_bytes.insert(addr);
    plan.accepted_samples += samples;
    plan.cfgs.push_back(std::make_unique<FunctionCfg>(std::move(*cfg)));
  }
}

// Entries that another function branches into (mempcpy jumps to memcpy+3)
// would run their patch from the middle: they are not patched. Direct
// branches are looked for in all the module's code (entry_branches.h), jump
// tables in the analysed functions.
void mark_branches_into_entry_bytes(const ModuleInput& in, ModulePlan& plan) {
  PatchSpans spans, pads;
  std::map<uint64_t, uint64_t> function_at;  // span or pad start → function
  for (const auto& cfg : plan.cfgs)
    if (auto spot = entry_spot(*cfg)) {
      spans[spot->at] = spot->pad.addr ? spot->at + kShortJumpSize : spot->addr + kEntryPatchSize;
      function_at[spot->at] = cfg->start;
      if (!spot->pad.addr) continue;
      // One pad, one function (entry_pads.h): were it ever another's too,
      // neither is patched.
      if (auto other = function_at.find(spot->pad.addr); other != function_at.end())
        plan.shares_entry_bytes.insert({other->second, cfg->start});
      pads[spot->pad.addr] = spot->pad.addr + kEntryPatchSize;
      function_at[spot->pad.addr] = cfg->start;
    }
  std::set<uint64_t> hit = entries_branched_into(*in.functions, *in.image, spans, pads);
  auto inside = [](const PatchSpans& in_spans, uint64_t a, bool from_start) -> std::optional<uint64_t> {
    auto it = in_spans.upper_bound(a);
    if (it == in_spans.begin()) return std::nullopt;
    --it;
    return (from_start ? it->first <= a : it->first < a) && a < it->second ? std::optional(it->first) : std::nullopt;
  };
  for (const auto& cfg : plan.cfgs)
    for (const JumpTable& t : cfg->tables)
      for (uint64_t a : t.targets) {
        bool foreign = a < cfg->start || a >= cfg->end;
        if (auto span = inside(spans, a, false); span && foreign) hit.insert(*span);
        if (auto pad = inside(pads, a, true)) hit.insert(*pad);  // a table entry in padding: it is no padding
      }
  for (uint64_t span : hit) plan.shares_entry_bytes.insert(function_at.at(span));
}

// Takes analysed function `addr` out of the plan, with its reason (I5).
void reject_analysed(const ModuleInput& in, ModulePlan& plan, uint64_t addr, const std::string& reason) {
  const elf::Function* f = in.functions->find(addr);
  const FunctionSamples* s = samples_of(in, addr);
  uint64_t samples = s ? s->samples : 0;
  plan.rejected.push_back({addr, f ? elf::display_name(*f) : "", reason, samples});
  plan.accepted_samples -= samples;
  plan.original_unwind.erase(addr);
  std::erase_if(plan.cfgs, [&](const auto& cfg) { return cfg->start == addr; });
}

// Where `cfg`'s return address is on entry, from its CFI rows (if any).
EntryFrame entry_of(const FunctionCfg& cfg, const std::vector<elf::CfiRow>* rows) {
  if (!rows) return {};
  auto state = elf::cfi_state_at(*rows, cfg.end, cfg.start);
  return state ? entry_frame(*state) : EntryFrame{std::nullopt, std::nullopt};
}

// Functions that call a user of its return address (return_address.h) stay
// in the original code: from a copy, the callee would see a cache address.
void reject_callers_of_return_address_users(const ModuleInput& in, const std::map<uint64_t, elf::Fde>& fdes,
                                            ModulePlan& plan) {
  std::map<uint64_t, const FunctionCfg*> analysed;
  for (const auto& cfg : plan.cfgs) analysed[cfg->start] = cfg.get();
  std::map<uint64_t, std::unique_ptr<FunctionCfg>> others;  // callees not in the plan
  ReturnAddressUsers users([&](uint64_t addr) -> ReturnAddressUsers::Analysed {
    if (auto it = analysed.find(addr); it != analysed.end()) {
      auto rows = plan.original_unwind.find(addr);
      return {it->second, entry_of(*it->second, rows == plan.original_unwind.end() ? nullptr : &rows->second)};
    }
    const elf::Function* f = in.functions->find(addr);
    auto cfg = f && f->addr == addr ? build_cfg(*f, *in.image) : fail("not a function start");
    if (!cfg) return {};
    auto rows = unwind_of(in, fdes, *cfg);
    const FunctionCfg* built = (others[addr] = std::make_unique<FunctionCfg>(std::move(*cfg))).get();
    if (!rows) return {built, {std::nullopt, std::nullopt}};
    return {built, entry_of(*built, *rows ? &**rows : nullptr)};
  }, in.caller_lookups);
  std::vector<std::pair<uint64_t, std::string>> callers;
  for (const auto& cfg : plan.cfgs)
    if (auto checked = check_callees(*cfg, users); !checked) callers.emplace_back(cfg->start, checked.error().message());
  for (const auto& [addr, reason] : callers) reject_analysed(in, plan, addr, reason);
}

// Step 2: block layout from the function's samples.
// A function whose dispatch goes through a rebuilt table keeps every block
// in the cache: a cold block left in the original code would send the rest
// of the call there, every dispatch after it reading the original table (an
// interpreter's rarely used opcode would take the whole loop out).
BlockLayout lay_out(const ModuleInput& in, const FunctionCfg& cfg, const LayoutOptions& options) {
  LayoutOptions chosen = options;
  if (std::any_of(cfg.tables.begin(), cfg.tables.end(), [](const JumpTable& t) { return t.rebuildable; }))
    chosen.cold = ColdBlocks::CopyLast;
  if (const SiteCounts* c = counts_of(in, cfg.start); c && !options.shuffle_seed)
    return layout_by_counts(cfg, counts_from(cfg, *c), chosen);
  const FunctionSamples* s = samples_of(in, cfg.start);
  if (!s && !options.shuffle_seed) return original_layout(cfg);
  if (!s) return layout_blocks(cfg, block_counts(cfg, {}), options);
  std::vector<EdgeCount> lbr = measured_edges(cfg, s->branches, s->traces);  // all zero without LBR
  return layout_blocks(cfg, block_counts(cfg, s->by_offset), chosen, &lbr);
}

// Counted instructions and calls: every direct call or tail jump to another
// function of the plan runs as often as its block. A node's weight is the
// instructions its blocks ran.
void counted_calls(const FunctionCfg& cfg, const SiteCounts& counts, const std::map<uint64_t, const FunctionCfg*>& plan,
                   uint64_t& instructions, std::vector<CallEdge>& edges) {
  FunctionCounts c = counts_from(cfg, counts);
  for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
    const Block& b = cfg.blocks[k];
    instructions += c.blocks[k] * b.count;
    for (std::size_t i = b.first; i < b.first + b.count; ++i) {
      const Instruction& in = cfg.instructions[i];
      bool leaves = in.has_target && (in.target < cfg.start || in.target >= cfg.end);
      if (leaves && c.blocks[k] && in.target != cfg.start && plan.count(in.target))
        edges.push_back({cfg.start, in.target, c.blocks[k]});
    }
  }
}

// Step 3: function order by call-graph affinity.
std::vector<const FunctionCfg*> order(const ModuleInput& in, const ModulePlan& plan) {
  std::vector<FunctionNode> nodes;
  std::map<uint64_t, const FunctionCfg*> by_addr;
  for (const auto& cfg : plan.cfgs) by_addr[cfg->start] = cfg.get();
  std::vector<CallEdge> edges;
  for (const auto& cfg : plan.cfgs) {
    const FunctionSamples* s = samples_of(in, cfg->start);
    uint64_t weight = s ? s->samples : 0;
    if (const SiteCounts* c = counts_of(in, cfg->start)) weight = 0, counted_calls(*cfg, *c, by_addr, weight, edges);
    nodes.push_back({cfg->start, cfg->end - cfg->start, weight});
  }
  if (in.profile && !in.counts)
    for (const CallEdge& e : in.profile->calls)
      if (by_addr.count(e.caller) && by_addr.count(e.callee)) edges.push_back(e);
  std::vector<const FunctionCfg*> out;
  for (uint64_t id : order_functions(nodes, edges)) out.push_back(by_addr.at(id));
  return out;
}

// Step 6: each copy's unwind rows; the functions whose rows cannot be made.
std::vector<CacheRejection> add_unwind_rows(ModulePlan& plan) {
  std::map<uint64_t, uint64_t> end_of;
  for (const auto& cfg : plan.cfgs) end_of[cfg->start] = cfg->end;
  std::vector<CacheRejection> failed;
  for (CachedFunction& f : plan.cache.functions) {
    auto original = plan.original_unwind.find(f.original_entry);
    if (original == plan.original_unwind.end()) continue;
    auto rows = cache_unwind_rows(original->second, end_of.at(f.original_entry), f.code);
    if (rows) f.unwind = std::move(*rows);
    else failed.push_back({f.original_entry, "copy without unwind rows: " + rows.error().message()});
  }
  return failed;
}

// Steps 4 and 6: the cache, then its unwind rows; built again without any
// function whose rows fail (never expected). `hot` ends as what the cache holds.
Status build_cache(const ModuleInput& in, std::vector<HotCode>& hot, const JitOptions& options, ModulePlan& plan) {
  std::vector<CacheRejection> dropped;  // over all rounds
  while (true) {
    auto cache = build_code_cache(hot, in.cache_base, in.plt, options.cache);
    if (!cache) return std::unexpected(cache.error());
    plan.cache = std::move(*cache);
    std::vector<CacheRejection> no_rows = add_unwind_rows(plan);
    dropped.insert(dropped.end(), plan.cache.rejected.begin(), plan.cache.rejected.end());
    dropped.insert(dropped.end(), no_rows.begin(), no_rows.end());
    std::set<uint64_t> cached;
    for (const CachedFunction& f : plan.cache.functions) cached.insert(f.original_entry);
    for (const CacheRejection& r : no_rows) cached.erase(r.function);
    std::erase_if(hot, [&](const HotCode& h) { return !cached.count(h.cfg->start); });
    if (no_rows.empty()) break;
  }
  plan.cache.rejected = std::move(dropped);
  return ok();
}

// Functions the cache left out (their copy failed emission or the verifier)
// become rejections like any other, with their reason (I5).
void take_cache_rejections(const ModuleInput& in, ModulePlan& plan) {
  for (const CacheRejection& r : plan.cache.rejected) reject_analysed(in, plan, r.function, r.reason);
}

}  // namespace

uint64_t provisional_cache_base(const elf::FunctionTable& functions) {
  uint64_t end = 0;
  for (const elf::Function& f : functions.functions()) end = std::max(end, f.addr + f.size);
  return (end + (256ull << 20)) & ~0xfffull;
}

void use_unwind_info(ModuleInput& input, const elf::ElfFile& file) {
  const elf::Section* eh = file.find_section(".eh_frame");
  if (!eh) return;
  auto bytes = file.contents(*eh);
  if (!bytes) return;
  input.eh_frame = *bytes;
  input.eh_frame_addr = eh->addr;
}

Status use_probe_sites(ModuleInput& input, const elf::ElfFile& file) {
  auto probes = elf::usdt_probes(file);
  if (!probes) return fail("USDT probe notes unreadable: " + probes.error().message());
  for (const elf::UsdtProbe& p : *probes) input.probe_sites[p.pc] = p.provider + ":" + p.name;
  input.patchable_function_entries = file.find_section("__patchable_function_entries") != nullptr;
  return ok();
}

Result<ModulePlan> optimize_module(const ModuleInput& in, const JitOptions& options) {
  if (!in.functions || !in.image) return fail("optimize_module: no module given");
  ModulePlan plan;
  std::map<uint64_t, elf::Fde> fdes = fdes_of(in);
  analyse(in, fdes, options, plan);
  mark_branches_into_entry_bytes(in, plan);
  reject_callers_of_return_address_users(in, fdes, plan);
  std::vector<HotCode> hot;
  std::set<uint64_t> analysed;
  for (const auto& cfg : plan.cfgs) analysed.insert(cfg->start);
  for (const FunctionCfg* cfg : order(in, plan)) {
    BlockLayout layout = with_entry_bytes_copied(*cfg, lay_out(in, *cfg, options.layout));
    const SiteCounts* counts = counts_of(in, cfg->start);
    hot.push_back({cfg, std::move(layout), plan.shares_entry_bytes.count(cfg->start) > 0,
                   counts ? promotions(*cfg, *counts, analysed) : Promotions{}});
  }
  if (auto built = build_cache(in, hot, options, plan); !built) return std::unexpected(built.error());
  for (const HotCode& h : hot) {
    plan.blocks += h.cfg->blocks.size();
    plan.blocks_left += h.cfg->blocks.size() - h.layout.order.size();
  }
  take_cache_rejections(in, plan);  // after the last use of `hot`: frees the rejected CFGs
  return plan;
}

}  // namespace dyni::jit
