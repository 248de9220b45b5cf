// Preparing an injection: read, choose, plan, place, record (prepare.h).
#include "dynid/inject/prepare.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <span>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "common/log.h"
#include "dynid/cache_scan.h"
#include "dynid/inject/frames_registration.h"
#include "dynid/inject/got_repoint.h"
#include "dynid/inject/module_policy.h"
#include "elf/function_table.h"
#include "jit/cache_eh_frame.h"
#include "jit/call_sites.h"

namespace dyni::inject {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

// The jit's plan for the hot functions with the cache at `cache_base` (link-time numbering).
Result<jit::ModulePlan> plan_at(const TargetModule& exe, const InjectRequest& req, uint64_t cache_base) {
  auto input = jit_input(exe, req.profile, req.hot, cache_base);
  if (!input) return std::unexpected(input.error());
  input->counts = req.counts;
  return jit::optimize_module(*input, req.options);
}

Result<Frames> frames_for(const jit::ModulePlan& plan, const TargetModule& exe, uint64_t blob_addr,
                          std::vector<std::string>& skipped) {
  Frames out;
  for (const jit::CachedFunction& f : plan.cache.functions) {
    auto fde = exe.fdes.find(f.original_entry);
    if (f.unwind.empty() || fde == exe.fdes.end()) {
      skipped.push_back(fmt::format("func_{:x}: no unwind information", f.original_entry));
      continue;
    }
    out.copies.push_back(&f);
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::vector<jit::CopyFrames> copies;
    for (const jit::CachedFunction* f : out.copies)
      copies.push_back({&f->code, &f->unwind, &exe.fdes.at(f->original_entry),
                        f->patch.entries.empty() ? 0 : f->patch.entries[0].addr});
    auto blob = jit::write_cache_eh_frame(copies, exe.unwind, blob_addr);
    if (blob) {
      out.blob = std::move(*blob);
      return out;
    }
    // "copy of 0x…: reason": leave that copy out and try again.
    uint64_t bad = 0;
    std::sscanf(blob.error().message().c_str(), "copy of %lx", &bad);
    auto it = std::find_if(out.copies.begin(), out.copies.end(), [&](auto* f) { return f->original_entry == bad; });
    if (it == out.copies.end()) return std::unexpected(blob.error());
    skipped.push_back(fmt::format("func_{:x}: {}", bad, blob.error().message()));
    out.copies.erase(it);
  }
  return fail("too many copies without describable frames");
}

Result<PlanWithFrames> plan_with_frames(const TargetModule& exe, InjectRequest req, uint64_t cache_base,
                                        uint64_t blob_addr_of_code_end, std::vector<std::string>& skipped) {
  for (int round = 0; round < 4; ++round) {
    auto plan = plan_at(exe, req, cache_base);
    if (!plan) return std::unexpected(plan.error());
    std::vector<std::string> dropped;
    auto frames = frames_for(*plan, exe, blob_addr_of_code_end + align_up(plan->cache.bytes.size(), 64), dropped);
    if (!frames) return std::unexpected(frames.error());
    if (dropped.empty()) return PlanWithFrames{std::move(*plan), std::move(*frames)};
    std::set<uint64_t> without;
    for (const jit::CachedFunction& f : plan->cache.functions) without.insert(f.original_entry);
    for (const jit::CachedFunction* f : frames->copies) without.erase(f->original_entry);
    std::erase_if(req.hot, [&](uint64_t a) { return without.count(a) > 0; });
    skipped.insert(skipped.end(), dropped.begin(), dropped.end());
  }
  return fail("copies kept losing their frames");
}

// `other_patches`: call sites, GOT slots and pads, each an entry of the record.
Layout layout_for(std::size_t functions, std::size_t other_patches, uint64_t code_size, uint64_t blob_size,
                  const jit::CounterLayout& counters) {
  Layout l;
  l.code_offset = align_up(record_size(functions + other_patches + 64, counters.slots) + 64, 4096);
  l.stub_offset = l.code_offset - 16;
  l.blob_offset = align_up(l.code_offset + code_size, 64);
  l.table_offset = align_up(l.blob_offset + blob_size, 8);
  l.total = l.table_offset + jit::kSearchEntryBytes * functions;
  l.counters_length = counters.slots ? align_up(counters.bytes(), 4096) : 0;
  return l;
}

// The direct call sites in `callers` left in the original code that reach
// `copies`' entries (jit/call_sites.h), for an optimized cache alone: a
// counting cache's copies are replaced within seconds.
// `upper_bound`: copied functions are scanned as callers too (the draft's
// count, which sizes the record: a copy the final plan rejects becomes a caller).
jit::CallSitePlan call_sites_for(const TargetModule& exe, const InjectRequest& req, const jit::ModulePlan& plan,
                                 std::span<const jit::CachedFunction* const> copies, bool upper_bound = false) {
  if (plan.cache.counter_slots || req.callers.empty()) return {};
  jit::CopiedCode copied;
  for (const jit::CachedFunction& f : plan.cache.functions) {
    if (!upper_bound) copied.functions.insert(f.original_entry);
    for (const jit::EntryPatch& e : f.patch.entries) copied.patch_bytes.insert(e.addr);
  }
  // A site calls the function's start, and is re-pointed at its copy's
  // start (which runs the copy of a kept first instruction, endbr64 or
  // other, patch_plan.h); the entry patch lies at the start or just after.
  for (const jit::CachedFunction* f : copies)
    if (!f->patch.entries.empty()) copied.entries[f->original_entry] = f->code.base;
  std::vector<elf::Function> callers;
  for (uint64_t start : req.callers)
    if (const elf::Function* f = exe.module->functions->find(start); f && f->addr == start) callers.push_back(*f);
  jit::CallSitePlan sites = jit::plan_call_sites(*exe.image, callers, copied);
  for (const std::string& why : sites.unscanned) log::debug("call sites: not scanned: {}", why);
  return sites;
}

std::vector<const jit::CachedFunction*> all_copies(const jit::ModulePlan& plan) {
  std::vector<const jit::CachedFunction*> out;
  for (const jit::CachedFunction& f : plan.cache.functions) out.push_back(&f);
  return out;
}

// The record's patches: every entry of the copies that have frames, then the
// call sites that reach them.
void record_patches(Prepared& p, const jit::CallSitePlan& call_sites, std::vector<std::string>& skipped) {
  const uint64_t bias = p.target.module->bias;
  for (const jit::CachedFunction* f : p.planned.frames.copies) {
    for (const jit::EntryPatch& e : f->patch.entries) {
      if (e.pad)  // before its short jump: patch_in_order writes it first
        p.record.patches.push_back({e.pad + bias, e.pad_original, e.pad_replacement, PatchKind::Pad});
      p.record.patches.push_back({e.addr + bias, e.original, e.replacement});
    }
    // Its copy still runs when other copies call it; its entry stays as it is.
    if (!f->unpatched.empty())
      skipped.push_back(fmt::format("func_{:x}: entry left unpatched: {}", f->original_entry, f->unpatched));
  }
  for (const jit::CallSitePatch& c : call_sites.patches)
    p.record.patches.push_back({c.addr + bias, c.original, c.replacement, PatchKind::CallSite});
}

}  // namespace

// Breakpoints in hot functions are said once per injection, not only counted
// among the skipped: an operator with gdb attached earlier may not know.
void warn_of_breakpoints(pid_t pid, std::span<const std::string> skipped) {
  std::size_t n = 0;
  const std::string* first = nullptr;
  for (const std::string& s : skipped)
    if (s.find(kBreakpointInCode) != std::string::npos && n++ == 0) first = &s;
  if (n) log::warn("pid {}: {} hot function(s) hold an int3 the file does not have, left in the original code "
                   "(a debugger's breakpoint or a uprobe; first: {})", pid, n, *first);
}

Result<Prepared> prepare(InjectRequest req, std::vector<std::string>& skipped) {
  constexpr int kReadAttempts = 5;
  Prepared p;
  Result<TargetModule> target = fail("not read");
  // A library unloaded or loaded again while it was read (a plugin dlclosed
  // and dlopened in a loop) is read again, a few times.
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto symbols = profiler::Symbolizer::for_process(req.pid);
    if (!symbols) return std::unexpected(symbols.error());
    p.symbols = std::make_unique<profiler::Symbolizer>(std::move(*symbols));
    target = read_target_module(req.pid, *p.symbols, req.module);
    if (target || target.error().message().find(kUnloadedWhileRead) == std::string::npos) break;
  }
  if (!target) return std::unexpected(target.error());
  p.target = std::move(*target);
  // Counts are by link-time address: another build of the module (a library
  // replaced on disk before this process loaded it, a group member's) would
  // lay its code out by another's.
  if (req.counts && !req.counts->build_id.empty() && req.counts->build_id != p.target.file->build_id())
    return fail(fmt::format("the counts are of build {} of {}, and the target maps build {}", req.counts->build_id,
                            p.target.module->path, p.target.file->build_id()));
  p.target.plt = plt_redirects(req.pid, p.target);
  auto maps = profiler::read_maps(req.pid);
  if (!maps) return std::unexpected(maps.error());
  auto register_frame = register_frame_function(req.pid, *maps, *p.symbols);
  if (!register_frame) return std::unexpected(register_frame.error());
  p.register_frame = *register_frame;
  // No unwinder in the process (a C program: python3, php): module_policy.h.
  if (auto fits = fit_to_unwinder(p.target, p.register_frame); !fits) return std::unexpected(fits.error());
  auto sites = find_syscall_sites(req.pid);  // also refuses strict seccomp and shadow stacks
  if (!sites) return std::unexpected(sites.error());
  p.sites = *sites;
  std::tie(p.target.lo, p.target.hi) = module_range(*maps, p.target.module->path);
  // Other modules' GOT slots bound into this one (got_repoint.h), read
  // before the record is sized: each may take an entry in it.
  auto slots = slot_candidates(req.pid, req.slot_holders, p.target.lo, p.target.hi);
  if (!slots) return std::unexpected(slots.error());
  // Threads may run in caches already there (a counting cache being
  // replaced, one ended by a new dynid): every stack proof needs their frames.
  // Their patches are dyni's own bytes: a function whose call sites (or
  // entry) one of them rewrote is still the file's code (the copy is made
  // from the file; its patch is checked live before it is written).
  std::vector<PatchRecord> ours;
  for (const CacheRecord& r : find_cache_records(req.pid, *maps)) {
    p.other_frames.push_back(from_record(req.pid, 0, r).frames);
    ours.insert(ours.end(), r.patches.begin(), r.patches.end());
  }
  if (req.replacing) ours.insert(ours.end(), req.replacing->patched.begin(), req.replacing->patched.end());
  const std::size_t skipped_before = skipped.size();
  req.hot = unchanged_in_memory(req.pid, p.target, req.hot, ours, skipped);
  warn_of_breakpoints(req.pid, std::span(skipped).subspan(skipped_before));
  auto outside_rseq = without_rseq_sections(req.pid, p.target, req.hot, skipped);
  if (!outside_rseq) return std::unexpected(outside_rseq.error());
  req.hot = std::move(*outside_rseq);
  const uint64_t bias = p.target.module->bias;
  // The size first (at a provisional address), then the plan at the real
  // place. The draft only sizes the place, so it skips the verifier (a
  // quarter of the jit's time): the plan that is injected is verified, and
  // a copy it rejects only leaves its code smaller than the draft (its call
  // sites are counted in the draft as if every copy could be rejected).
  std::vector<std::string> ignored;
  InjectRequest sizing = req;
  sizing.options.cache.verify = false;
  auto draft = plan_with_frames(p.target, sizing, jit::provisional_cache_base(*p.target.module->functions), 0x10000000, ignored);
  if (!draft) return std::unexpected(draft.error());
  const std::size_t draft_call_sites = call_sites_for(p.target, req, draft->plan, all_copies(draft->plan), true).patches.size();
  std::size_t draft_pads = 0;  // the final plan's functions, and so their pads, are among the draft's
  for (const jit::CachedFunction& f : draft->plan.cache.functions)
    for (const jit::EntryPatch& e : f.patch.entries) draft_pads += e.pad != 0;
  p.layout = layout_for(draft->plan.cache.functions.size(), draft_call_sites + slots->size() + draft_pads,
                        draft->plan.cache.bytes.size() + 4096,
                        draft->frames.blob.size() + 4096, draft->plan.cache.counter_layout());
  const uint64_t bytes = p.layout.total + p.layout.counters_length;
  auto place = place_cache(*maps, {p.target.lo, p.target.hi, bytes, 0, 0x10000, bytes < req.small_cache_bytes});
  if (!place) return std::unexpected(place.error());
  p.place = *place;
  // A counting cache's counters at the top of the place, the code below them.
  p.place.length -= p.layout.counters_length;
  // A huge page needs a whole aligned 2 MiB of the code's mapping: a counting
  // cache whose code and counters share 2 MiB gets none (no THP lift for it).
  p.place.huge = p.place.huge && p.place.length >= kHugePage;
  p.counters_addr = p.place.addr + p.place.length;
  req.options.cache.counters_base = p.counters_addr - bias;
  auto planned = plan_with_frames(p.target, req, place->addr + p.layout.code_offset - bias,
                                  place->addr + p.layout.code_offset, skipped);
  if (!planned) return std::unexpected(planned.error());
  p.planned = std::move(*planned);
  const jit::CodeCache& cache = p.planned.plan.cache;
  p.layout.blob_offset = align_up(p.layout.code_offset + cache.bytes.size(), 64);
  p.layout.table_offset = align_up(p.layout.blob_offset + p.planned.frames.blob.size(), 8);
  auto table = jit::eh_frame_search_table(p.planned.frames.blob, place->addr + p.layout.blob_offset,
                                          place->addr + p.layout.table_offset);
  if (!table) return std::unexpected(table.error());
  p.search_table = std::move(*table);
  if (p.layout.table_offset + p.search_table.size() > p.place.length ||
      cache.counter_layout().bytes() > p.layout.counters_length ||
      cache.counter_layout().stripes != draft->plan.cache.counter_layout().stripes)
    return fail("the cache outgrew its place");
  p.record = {p.target.file->build_id(), bias, p.place.addr, p.place.length, p.layout.code_offset, cache.bytes.size(),
              p.layout.blob_offset, p.planned.frames.blob.size(), p.layout.table_offset, p.search_table.size(), {},
              CacheTier::Optimized, 0, 0, {}, {}};
  if (cache.counter_slots) {
    p.record.tier = CacheTier::Counting;
    p.record.counters_addr = p.counters_addr, p.record.counters_length = p.layout.counters_length;
    for (const jit::CachedFunction& f : cache.functions)
      for (const jit::EmittedCounter& c : f.code.counters) p.record.counter_sites.push_back({c.addr + bias, c.site.form()});
  }
  record_patches(p, call_sites_for(p.target, req, p.planned.plan, p.planned.frames.copies), skipped);
  p.record.slots = plan_slots(*slots, copy_ranges(p));
  const std::size_t record_bytes = encode_record(p.record).size();
  // A record the scan could not read back would make the cache invisible to a new dynid.
  if (record_bytes > kMaxRecordBytes)
    return fail(fmt::format("the cache's record would take {} bytes, more than a new dynid reads ({}): "
                            "too many patches or counter sites", record_bytes, kMaxRecordBytes));
  if (record_bytes > p.layout.stub_offset) return fail("the cache's record outgrew its page");
  // What a new dynid will check of it (cache_record.h: patches into the
  // cache, call sites from its entries, none overlapping), checked first.
  if (auto back = decode_record(encode_record(p.record), p.place.addr, p.place.length); !back)
    return fail("the cache's record would not read back: " + back.error().message());
  return p;
}

std::vector<CopyRange> copy_ranges(const Prepared& p) {
  std::vector<CopyRange> out;
  const uint64_t bias = p.target.module->bias;
  for (const jit::CachedFunction& f : p.planned.plan.cache.functions) {
    const elf::Function* fn = p.target.module->functions->find(f.original_entry);
    const bool patched = !f.patch.entries.empty();
    out.push_back({f.code.base + bias, f.code.bytes.size(), f.original_entry + bias,
                   fn ? elf::display_name(*fn) : fmt::format("func_{:x}", f.original_entry), {},
                   patched ? f.patch.entries[0].addr + bias : 0, !patched || f.patch.entries[0].probe_safe});
    for (const jit::TranslationEntry& t : f.code.translation)
      if (out.back().lines.empty() || out.back().lines.back().second != t.original_addr + bias)
        out.back().lines.emplace_back(static_cast<uint32_t>(t.new_addr - f.code.base), t.original_addr + bias);
  }
  return out;
}

}  // namespace dyni::inject
