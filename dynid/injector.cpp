// Live injection of a module's hot code (the executable's, or a library's).
// The steps, in order, each in
// a file of its own under dynid/inject/:
//   prepare              read the module, choose, plan, place, record (nothing touched yet)
//   map_in_window        one short stop window: the cache's mmap (and counters')
//   write_contents       stub, code, frames, search table (nothing reaches them yet, I2)
//   register frames      the target's unwinder learns the copies (I7)
//   write_record         last before any patch: the cache is now complete
//   collapse_if_split    huge pages a fork split, collapsed again
//   patch_in_order       every entry, then every call site to a copy, in stop
//                        windows after the live checks (I4)
//   repoint_slots        other copied modules' JUMP_SLOT GOT slots bound to
//                        the copied functions, at the copies (all_hot_modules)
// undo and redo (patch_entries.cpp) and the counters (counters.cpp) live
// beside them.
#include "dynid/injector.h"

#include <fmt/format.h>

#include "dynid/cache_plan.h"
#include "dynid/inject/cache_contents.h"
#include "dynid/inject/target_module.h"
#include "dynid/inject/frames_registration.h"
#include "dynid/inject/got_repoint.h"
#include "dynid/inject/map_window.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/inject/prepare.h"
#include "dynid/inject/target_checks.h"
#include "dynid/proc_reader.h"
#include "jit/cache_eh_frame.h"

namespace dyni {
namespace {

using namespace inject;

// Fails when a plan has nothing to inject, which then maps nothing (a cache
// stays for the process's life); nor does one whose every entry is left
// unpatched: nothing would reach it.
Status worth_injecting(const InjectRequest& req, const Prepared& p, const std::vector<std::string>& skipped) {
  if (!p.planned.plan.cache.functions.empty() && !p.record.patches.empty()) return ok();
  // The first reason: a skipped entry's, else the jit's first rejection.
  std::string first = skipped.empty() ? "" : skipped.front();
  if (first.empty() && !p.planned.plan.rejected.empty())
    first = p.planned.plan.rejected.front().name + ": " + p.planned.plan.rejected.front().reason;
  return fail(fmt::format("nothing to inject: none of the {} hot functions could be {}{}", req.hot.size(),
                          p.planned.plan.cache.functions.empty() ? "copied" : "entered by a patch",
                          first.empty() ? "" : " (first reason: " + first + ")"));
}

// What the injection holds once its cache is mapped: where the code and its
// frames are, its copies and counters, and the caches already in the target.
void describe(const InjectRequest& req, const Prepared& p, Injection& out) {
  const jit::CodeCache& cache = p.planned.plan.cache;
  out.code_addr = p.place.addr + p.layout.code_offset;
  out.code_size = cache.bytes.size();
  if (req.counts) out.count_metrics = jit::count_metrics(p.planned.plan, *req.counts);
  out.tier = p.record.tier;
  out.counter_sites = p.record.counter_sites;
  out.counter_layout = cache.counter_layout();
  out.build_id = p.record.build_id, out.module = p.target.module->path, out.module_bias = p.target.module->bias;
  out.module_inode = p.target.module->inode, out.module_load = p.target.load, out.bypassed_slots = p.target.plt_slots;
  out.module_dev = p.target.module->dev;
  for (const jit::CachedFunction& f : cache.functions) {
    if (!f.counters.empty()) out.counted[f.original_entry] = f.counters;
    out.promoted_calls += f.code.promoted.size();
  }
  out.eh_frame_addr = p.place.addr + p.layout.blob_offset;
  out.eh_frame = p.planned.frames.blob;
  out.copies = copy_ranges(p);
  out.frames = {out.code_addr, out.code_addr + out.code_size, p.place.addr + p.layout.table_offset,
                p.search_table.size() / jit::kSearchEntryBytes};
  out.other_frames = p.other_frames;
  out.other_copies = req.other_copies;
  if (req.replacing) {
    out.other_copies.insert(out.other_copies.end(), req.replacing->other_copies.begin(), req.replacing->other_copies.end());
    out.other_copies.insert(out.other_copies.end(), req.replacing->copies.begin(), req.replacing->copies.end());
  }
}

// Unwind information first: no copy runs before it is registered.
Status register_frames_of(const InjectRequest& req, const Prepared& p, Injection& out) {
  if (!p.register_frame) {
    out.frames_registered = "no: no unwinder is loaded in the target";
    return ok();
  }
  RegisterCall call{p.register_frame, p.place.addr + p.layout.stub_offset, req.call_timeout, req.single_threaded};
  if (auto r = register_cache_frames(out, *p.symbols, p.target.executable, call); !r) return r;
  out.frames_registered = "yes: __register_frame of libgcc_s";
  return ok();
}

// The entry jumps of the counting cache `req.replacing`, which the patches re-point.
Replaced replaced_jumps(const InjectRequest& req) {
  Replaced out;
  if (req.replacing)
    for (const PatchRecord& old : req.replacing->patched) out[old.addr] = old.replacement;
  return out;
}

}  // namespace

const jit::ModuleProfile* layout_profile(const jit::ModuleProfile& profile) {
  for (const auto& [start, f] : profile.functions)
    if (!f.branches.empty()) return &profile;
  return nullptr;
}

Result<Injection> inject_module(const InjectRequest& req) {
  Injection out;
  out.pid = req.pid;
  auto stat = read_proc_stat("/proc", req.pid);
  if (!stat) return std::unexpected(stat.error());
  out.start_time = stat->start_time;
  if (req.start_time && stat->start_time != req.start_time)
    return fail(fmt::format("process {} is gone: its pid is another process's", req.pid));
  if (auto same = same_image(*stat, req.image); !same) return std::unexpected(same.error());
  const auto t0 = std::chrono::steady_clock::now();
  auto p = prepare(req, out.skipped);
  if (!p) return std::unexpected(p.error());
  out.plan = plan_summary(p->planned.plan, p->target.module->path,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (auto worth = worth_injecting(req, *p, out.skipped); !worth) return std::unexpected(worth.error());
  auto mapped = map_in_window(req, *p, out);
  if (!mapped) return std::unexpected(mapped.error());
  // From here on the target holds dyni's cache: failures are reported in
  // `out.error`, with what was done, so that it can be undone.
  if (!out.error.empty()) return out;
  describe(req, *p, out);
  Status done = write_contents(*p, out);
  if (done) done = register_frames_of(req, *p, out);
  if (done) done = write_record(*p, out);
  if (!done) {
    out.error = done.error().message();
    return out;
  }
  collapse_if_split(*p, out, *mapped);
  out.pad_entries = pad_entries(p->record.patches);
  if (auto r = patch_in_order(p->record.patches, out, replaced_jumps(req)); !r) out.error = r.error().message();
  // Last, the other modules' calls: their GOT slots bound to the copied
  // functions whose entries now hold dyni's jump.
  out.slots = p->record.slots;
  if (out.error.empty())
    if (auto r = repoint_slots(out.slots, out); !r) out.error = r.error().message();
  return out;
}

std::map<std::string, std::size_t> skipped_by_kind(const std::vector<std::string>& skipped) {
  std::map<std::string, std::size_t> out;
  for (const std::string& s : skipped) {
    auto colon = s.find(": ");
    std::string kind = colon == std::string::npos ? s : s.substr(colon + 2);
    auto at = kind.find(" at 0x");
    out[at == std::string::npos ? kind : kind.substr(0, at)]++;
  }
  return out;
}

Injection from_record(pid_t pid, uint64_t start_time, const CacheRecord& record) {
  Injection in;
  in.pid = pid, in.start_time = start_time;
  in.tier = record.tier;
  in.cache = {record.cache_addr, record.cache_length, 0, false, {}};
  in.counters = {record.counters_addr, record.counters_length, 0, false, {}};
  in.counter_sites = record.counter_sites;
  in.build_id = record.build_id, in.module_bias = record.module_bias;
  in.code_addr = record.cache_addr + record.code_offset;
  in.code_size = record.code_size;
  in.eh_frame_addr = record.cache_addr + record.eh_frame_offset;
  in.frames = {in.code_addr, in.code_addr + in.code_size, record.cache_addr + record.search_table_offset,
               record.search_table_size / jit::kSearchEntryBytes};
  in.patched = record.patches;
  in.pad_entries = pad_entries(record.patches);
  in.slots = in.slots_patched = record.slots;
  return in;
}

}  // namespace dyni
