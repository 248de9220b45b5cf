// The per-target pipeline thread: profile, then (later) dynimize.
#include "dynid/lifecycle.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/log.h"
#include "common/paths.h"
#include "dynid/cache_mapping.h"
#include "dynid/cache_plan.h"
#include "dynid/cache_scan.h"
#include "dynid/counting_phase.h"
#include "dynid/adopted_copies.h"
#include "dynid/copy_origins.h"
#include "dynid/gdb_symbols.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/inject/target_module.h"
#include "dynid/perf_map.h"
#include "dynid/proc_reader.h"
#include "dynid/target_memory.h"
#include "elf/elf_file.h"
#include "jit/call_sites.h"
#include "jit/patch_plan.h"

namespace dyni {
namespace {
constexpr auto kStepInterval = std::chrono::milliseconds(100);
// A profile that hit its time bound with fewer samples decides no target unsupported.
constexpr uint64_t kMinSamplesForUnsupported = 1000;
// -profile's modules, hottest first.
constexpr std::size_t kModulesShown = 8;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


// I8: a cache is freed only once nothing can run in it or return into it.
// Stacks can be proven (thread_unwind.h), but copies' addresses also sit
// where no unwinder looks: setjmp buffers and coroutine contexts (mangled by
// glibc), saved ucontexts. So a cache, and its frames registered with the
// target's unwinder (a throw through a copy still running needs them), stay
// until the process exits; -redo reuses them.
constexpr const char* kCacheKeptBecause =
    "kept until the process exits: code addresses in it may be saved outside any stack (setjmp buffers, "
    "coroutine contexts), which no check can prove unused";

}  // namespace

nlohmann::json library_loaded(const Injection& in) {
  if (!in.module_load) return nullptr;
  auto maps = profiler::read_maps(in.pid);
  if (!maps) return nullptr;  // gone: the next scan says so
  return std::any_of(maps->begin(), maps->end(), [&](const profiler::Mapping& m) {
    return m.executable && m.file_backed() && inject::still_the_module(in, m);
  });
}

namespace {

// A group's leader is profiled across its group (process_group.h): with the
// members that run its image at its addresses (the same ProcStat::image:
// forked from one parent, without an exec since) and what they all fork.
// A leading parent's work is all there.
profiler::RecorderOptions across_group(profiler::RecorderOptions options, const Target& target,
                                       const TargetTable& table) {
  if (!target.group_leader || !target.image) return options;
  options.sampler.descendants = true;
  for (const Target& t : table.snapshot())
    if (t.group == target.group && t.image == target.image && t.pid != target.pid)
      options.sampler.relatives.push_back(t.pid);
  return options;
}

// `pid` maps a cache at `cache_addr`: a child adopting it got it by fork
// from that parent (a postmaster's backend). Only a label: nothing is
// written on its account.
bool maps_cache_at(pid_t pid, uint64_t cache_addr) {
  if (pid <= 1) return false;
  auto maps = profiler::read_maps(pid);
  return maps && std::any_of(maps->begin(), maps->end(), [&](const profiler::Mapping& m) { return m.start == cache_addr; });
}

}  // namespace

TargetLifecycle::TargetLifecycle(const Target& target, TargetTable& table,
                                 profiler::RecorderOptions options, DynimizeOptions dynimize, bool adopt_only,
                                 std::vector<ParentCopies> parent)
    : pid_(target.pid), ppid_(target.ppid), start_time_(target.start_time), image_(target.image), name_(target.name), table_(table),
      group_(target.group), follows_(target.follows), as_parent_(target.as_parent),
      with_descendants_(target.with_descendants), options_(across_group(options, target, table)), dynimize_(dynimize),
      adopt_only_(adopt_only),
      started_in_(target.state), parent_copies_(std::move(parent)),
      thread_([this] { run(); }) {}

namespace {

ParentCopies* copies_at(std::vector<ParentCopies>& all, uint64_t cache_addr) {
  for (ParentCopies& p : all)
    if (p.cache_addr == cache_addr) return &p;
  return nullptr;
}

}  // namespace

std::vector<ParentCopies> TargetLifecycle::copies_for_children() const {
  std::vector<ParentCopies> out;
  std::lock_guard lock(injection_mutex_);
  if (!injection_) return out;
  auto add = [&](const Injection& in, std::optional<uint64_t> huge, const std::string& gdb) {
    for (const ParentCopies& adopted : adopted_copies_)
      if (adopted.cache_addr == in.cache.addr) {
        out.push_back(adopted);
        out.back().gdb_command = gdb;
        return;
      }
    if (in.copies.empty()) return;
    ParentCopies p{in.cache.addr, {}, huge, gdb};
    p.copies.reserve(in.copies.size());
    for (const CopyRange& c : in.copies)
      p.copies.push_back({c.cache_addr, c.size, c.original_entry, c.name, {}, c.entry_patch, c.entry_probe_safe});
    out.push_back(std::move(p));
  };
  add(*injection_, huge_page_bytes_, gdb_command_);
  if (out.empty()) return out;  // the first module's first, or none
  for (const Injection& in : more_) {
    // Failed when this dynid injected it: its copies never run (nor a
    // child's). An adopted one with an error may have live patches.
    if (!in.error.empty() && !adopted_) continue;
    auto gdb = more_gdb_commands_.find(in.cache.addr);
    add(in, std::nullopt, gdb != more_gdb_commands_.end() ? gdb->second : "");
  }
  return out;
}

TargetLifecycle::~TargetLifecycle() {
  stop_ = true;
  thread_.join();
}

// A bug must cost this target its optimization, never dynid its life.
void TargetLifecycle::run() {
  // Profiling and the jit at the nice value the target runs at by default,
  // not the main loop's (daemon.h, kMainLoopNice), which this thread inherited.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 0);
  try {
    if (!adopt_existing_cache() && !adopt_only_) {
      if (follows_ && dynimize_.dynimize)
        follow_group_plan();
      else
        run_pipeline();
    }
  } catch (const std::exception& e) {
    log::error("target {} pid {}: internal error: {}", name_, pid_, e.what());
    try {
      end_counting();  // never left counting: entries back, counters off
    } catch (const std::exception& again) {
      log::error("target {} pid {}: ending the counting phase: internal error: {}", name_, pid_, again.what());
    }
    std::string why = std::string("internal error: ") + e.what();
    move(TargetState::Profiling, TargetState::Failed, why);
    bool injected = false;
    {
      std::lock_guard lock(injection_mutex_);
      injected = injection_.has_value();
    }
    if (injected)
      settle_after_failure(TargetState::Dynimizing, why);  // live entries: dynimized (partly), -undo reaches them
    else
      move(TargetState::Dynimizing, TargetState::Failed, why);
  }
  finished_ = true;
}

void TargetLifecycle::run_pipeline() {
  auto t0 = std::chrono::steady_clock::now();
  if (auto r = start_profiling(); !r) {
    fail_with(TargetState::Failed, "profiling: " + r.error().message());
    return;
  }
  if (auto r = check_executable(); !r) {
    fail_with(TargetState::Unsupported, r.error().message());
    return;
  }
  if (auto r = profile_until_stable(); !r) {
    fail_with(TargetState::Failed, "profiling: " + r.error().message());
    return;
  }
  if (stop_) return;
  seconds_profiling_ = seconds_since(t0);
  if (!choose_hot_module()) return;  // unsupported: nothing mapped, nothing written
  // Not moved on (license gone, target replaced): nothing more to do.
  if (!move(TargetState::Profiling, TargetState::Dynimizing, "hot set found")) return;
  if (!dynimize_.dynimize) {
    plan_cache();
    log::info("target {} pid {}: dynimize = false in the config: the plan is not injected", name_, pid_);
    return;
  }
  dynimize();  // reports the plan it injected (-profile's "jit")
}

// A target that holds a cache with a record for its executable was dynimized
// before (an earlier dynid, or its parent before a fork): it is adopted, not
// profiled and injected again. Returns true when the lifecycle ends here.
bool TargetLifecycle::adopt_existing_cache() {
  auto maps = profiler::read_maps(pid_);
  if (!maps) return false;  // gone: the next scan drops it
  // A cache whose record this dynid cannot read (a newer dynid's, after a
  // package downgrade) may hold live patches: never a second cache beside it.
  if (std::vector<std::string> unreadable = unreadable_cache_records(pid_, *maps); !unreadable.empty()) {
    std::string why = unreadable.front() + ": left alone (undo it with the dynid that made it, or restart the process)";
    log::warn("target {} pid {}: {}", name_, pid_, why);
    adopted_ = true;  // the lifecycle's end: the target is not injected
    settle_adoption(TargetState::Failed, why);
    return true;
  }
  std::vector<CacheRecord> all = find_cache_records(pid_, *maps);
  std::vector<CacheRecord> records = end_counting_caches(all);
  if (records.empty()) return false;
  // Only now the executable's build-id, from its notes alone: every new
  // process of a listed name comes here (a backend per connection).
  auto exe = read_exe("/proc", pid_);
  auto file = elf::ElfFile::open_notes(fmt::format("/proc/{}/exe", pid_));
  std::string build_id = file ? file->build_id() : "";
  // Each record's module and live patches, read once. The first module is
  // the cache a forked child shares with its parent's first, else the one
  // with the most live patches; the others are adopted beside it
  // (adopt_more_modules).
  std::vector<FoundRecord> found;
  for (const CacheRecord& r : records)
    found.push_back({&r, module_of_record(pid_, *maps, r, exe ? exe->path : "", build_id), live_patches(pid_, r.patches)});
  const FoundRecord* first = nullptr;
  for (const FoundRecord& f : found) {
    if (!f.module) continue;
    if (!parent_copies_.empty() && f.record->cache_addr == parent_copies_.front().cache_addr) {
      first = &f;
      break;
    }
    if (!first || f.live > first->live) first = &f;
  }
  if (!first) {
    std::string why = fmt::format("it holds a dyni cache at {:#x} for another build ({}), not for its executable ({}) "
                                  "nor for a library it maps where the cache's record says: left alone",
                                  records[0].cache_addr, records[0].build_id, build_id);
    log::warn("target {} pid {}: {}", name_, pid_, why);
    adopted_ = true;  // the lifecycle's end: the target is not injected
    settle_adoption(TargetState::Failed, why);
    return true;
  }
  const CacheRecord* best = first->record;
  const std::size_t best_live = first->live;
  Injection adopted = from_record(pid_, start_time_, *best);
  // A library's cache: redo writes only into that file where it is loaded now.
  adopted.module = first->module->path;
  adopted.module_inode = first->module->inode, adopted.module_load = first->module->load;
  adopted.module_dev = first->module->dev;
  for (const CacheRecord& r : all)  // threads may still run in any of them (a counting cache ended, I8)
    if (r.cache_addr != best->cache_addr) adopted.other_frames.push_back(from_record(pid_, start_time_, r).frames);
  const bool inherited = maps_cache_at(ppid_, best->cache_addr);
  // An inherited cache is its parent's pages; smaps, slow to read, is read
  // outside the lock (status requests take it).
  std::optional<uint64_t> huge;
  if (inherited && !parent_copies_.empty() && parent_copies_.front().cache_addr == best->cache_addr)
    huge = parent_copies_.front().huge_page_bytes;
  else if (auto bytes = huge_page_bytes(pid_, adopted.cache))
    huge = *bytes;
  {
    std::lock_guard lock(injection_mutex_);
    injection_ = std::move(adopted);
    adopted_ = true;
    inherited_ = inherited;
    huge_page_bytes_ = huge;
  }
  // Dynimized while any module's patch is live: -undo must reach it.
  const std::size_t more_live = adopt_more_modules(*maps, all, found, *first);
  TargetState to = best_live + more_live ? TargetState::Dynimized : TargetState::Undone;
  std::string why = fmt::format("found dyni's cache at {:#x} in the target{}: {} of its {} patches (entries and call sites) live{}",
                                best->cache_addr, inherited_ ? fmt::format(", inherited from its parent pid {}", ppid_) : "",
                                best_live, best->patches.size(),
                                more_live ? fmt::format(", and {} of the further modules' caches'", more_live) : "");
  log::info("target {} pid {}: {}", name_, pid_, why);
  settle_adoption(to, why);  // first: -undo reaches it from now on
  // Each module's cache is named (perf, -addr2orig, gdb): the first's last,
  // so that its gdb_command in -status says every file is written.
  // Whose files: asked once, before this dynid appends to them.
  const bool makers_files = ::access(origins_path(pid_, start_time_).c_str(), F_OK) == 0;
  std::vector<AdoptedCache> caches;
  {
    std::lock_guard lock(injection_mutex_);
    for (const Injection& in : more_)
      for (const CacheRecord& r : records)
        if (r.cache_addr == in.cache.addr) caches.push_back({&r, in.module, false, makers_files});
    caches.push_back({best, injection_->module, true, makers_files});
  }
  for (const AdoptedCache& cache : caches) note_adopted_copies(cache);
  return true;
}

// A counting cache left in the target (a dynid killed while counting, or a
// parent that forked while counting) never comes back: its live entries get
// the file's bytes again and its counter sites are turned off. The other
// records are returned.
std::vector<CacheRecord> TargetLifecycle::end_counting_caches(std::vector<CacheRecord> records) {
  // An entry that holds an optimized cache's jump was re-pointed by it: not
  // the counting cache's to restore (counting_phase.h, replaced_by).
  std::map<uint64_t, std::array<uint8_t, 5>> optimized;  // entry → the optimized cache's bytes there
  for (const CacheRecord& r : records)
    if (r.tier != CacheTier::Counting)
      for (const PatchRecord& p : r.patches) optimized[p.addr] = p.replacement;
  auto holds_optimized = [&](uint64_t addr, std::size_t n) {
    auto it = optimized.find(addr);
    if (it == optimized.end()) return false;
    auto live = read_target(pid_, addr, n);
    return live && live->size() == n && std::equal(live->begin(), live->end(), it->second.begin());
  };
  // A short jump is the same 2 bytes in both caches (entry_pads.h): it is
  // the optimized cache's only once its pad holds that cache's jmp too.
  auto re_pointed = [&](const PatchRecord& p) {
    return holds_optimized(p.addr, changed_bytes(p)) &&
           (!is_short_entry(p) || holds_optimized(short_entry_pad(p), kPatchBytes));
  };
  std::vector<CacheRecord> others;
  for (CacheRecord& r : records) {
    if (r.tier != CacheTier::Counting) {
      others.push_back(std::move(r));
      continue;
    }
    Injection counting = from_record(pid_, start_time_, r);
    std::erase_if(counting.patched, re_pointed);
    std::size_t live = live_patches(pid_, counting.patched);
    auto undone = undo_patches(counting);
    auto off = counters_off(counting);
    log::info("target {} pid {}: ended the counting cache at {:#x} left in it: {} live entries {}, counters {}", name_,
              pid_, r.cache_addr, live, undone ? "restored" : "not restored: " + undone.error().message(),
              off ? fmt::format("off at {} sites", *off) : "not turned off: " + off.error().message());
  }
  return others;
}

// An adopted target leaves waiting, or profiling: it may have turned busy
// while its cache was being looked for; or unlicensed.
void TargetLifecycle::settle_adoption(TargetState to, const std::string& why) {
  // Unlicensed too: a host whose license lapsed must still be able to undo.
  for (TargetState from : {TargetState::Waiting, TargetState::Profiling, TargetState::Unlicensed})
    if (move(from, to, why)) return;
}

// Injects the hot set (injector.h). Any failure leaves the target running its
// original code: entries already patched are restored; a mapped cache stays
// (I8: no proof yet that no thread is in it) and -status -json says where.
void TargetLifecycle::dynimize() {
  auto t0 = std::chrono::steady_clock::now();
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  Result<Injection> injected = fail("not injected");
  double share_copied = 0;
  std::shared_ptr<GroupPlan> for_group;  // what the group's other members may be dynimized by
  try {
    auto hot = module_profile(*recorder, module_);
    if (!hot) {
      fail_injection(hot.error().message());
      return;
    }
    const jit::ModuleProfile* layout = layout_profile(hot->profile);
    layout_ = layout ? "by profile (LBR edges)" : "original block order (no LBR: inferred edges lay out worse)";
    InjectRequest request = base_request();
    request.module = module_is_executable_ ? "" : module_;
    request.hot = hot->profile.hot_set(kHotSetShare);
    for (const auto& [start, samples] : hot->profile.functions) request.callers.push_back(start);
    request.profile = layout;
    std::optional<jit::ModuleCounts> counts;
    if (dynimize_.counting) {
      auto counted = count_hot_set(request);
      if (stop_) {
        end_counting();  // counted or not, never left counting: entries back, counters off (with retries)
        return;
      }
      std::lock_guard lock(counting_mutex_);
      if (counting_ && counting_->stopped()) return;  // -undo: the target is undone, on its original code
      if (counted) {
        counts = std::move(counted->first);
        more_counts_ = std::move(counted->more);  // inject_more_modules lays them out by these
        request.counts = &*counts;
        request.hot = functions_that_ran(*counts);
        request.profile = nullptr;
        layout_ = fmt::format("by counts ({:.1f} s of counting copies)", counts->seconds);
      } else {
        log::warn("target {} pid {}: counting: {}; laid out without counts", name_, pid_, counted.error().message());
      }
      // With counts, the optimized cache replaces the counting one; a phase
      // that failed has ended (or is ended after), and the code is laid out
      // without counts, replacing nothing. Either way stop() refuses from
      // now on: -undo waits for the injection.
      const bool switching = counting_ && counting_->begin_switch();
      if (counted && !switching) return;  // stopped by -undo just now: undone
      if (counted) request.replacing = &counting_->injection();
      // Threads may be stopped in the further modules' counting copies too.
      for (const auto& [path, more] : more_counts_)
        if (const Injection* theirs = counting_->injection_of(path))
          request.other_copies.insert(request.other_copies.end(), theirs->copies.begin(), theirs->copies.end());
    }
    // The further modules' calls to its hot functions through their PLTs
    // reach its copies (inject/got_repoint.h); not the counting copies'.
    request.slot_holders = further_modules();
    injected = inject_module(request);
    if (injected) share_copied = sampled_share_copied(hot->profile, *injected);
    if (injected && request.replacing) replaced_counting(*injected, *request.replacing);
    // The further modules' counting caches end once they are replaced too
    // (settle_injection, below); the first's entries that ran no copy were
    // put back when counting paused for the last time.
    if (!injected || !injected->error.empty() || injected->patched.empty() || more_counts_.empty())
      end_counting();  // what the optimized cache did not re-point goes back; counters off
    if (counts) save_counts(*counts);
    if (counts && injected && injected->error.empty())
      for_group = std::make_shared<GroupPlan>(GroupPlan{pid_, *counts, request.hot, request.callers, request.module});
  } catch (const std::exception& e) {  // a bug must cost this target its injection, not dynid its life
    injected = fail(std::string("internal error: ") + e.what());
    end_counting();  // never left counting: its entries back, its counters off
  }
  seconds_optimizing_ = seconds_since(t0);
  const bool settled = settle_injection(std::move(injected), share_copied, true);  // ends every counting cache
  end_counting();  // and when settling failed before it (a no-op when ended)
  save_more_counts();
  if (for_group) for_group->more = std::move(more_plans_);  // the further modules injected by their counts
  if (settled && for_group) table_.publish_group_plan(group_, for_group);
}

// The optimized cache `optimized` replaced counting cache `counting`: its
// entries re-pointed are not the counting phase's to put back, and what the
// counting copies' plan said stays said. The counting copies were planned
// from the whole hot set, the optimized ones from what ran in them: a
// function kept out (a USDT probe site) never ran in a copy, so only the
// first plan names it; likewise a function the counting copies skipped (a
// breakpoint in it).
void TargetLifecycle::replaced_counting(Injection& optimized, const Injection& counting) {
  if (optimized.plan.is_object() && counting.plan.is_object())
    optimized.plan["kept_out"] = counting.plan.value("kept_out", nlohmann::json::array());
  auto function = [](const std::string& why) { return why.substr(0, why.find(':')); };
  std::set<std::string> said;
  for (const std::string& why : optimized.skipped) said.insert(function(why));
  for (const std::string& why : counting.skipped)
    if (said.insert(function(why)).second) optimized.skipped.push_back(why);
  std::lock_guard lock(counting_mutex_);
  if (counting_) counting_->replaced_by(optimized);
}

// A member of a busy group that has a plan (process_group.h): dynimized by
// it, with no profile or counting phase of its own.
void TargetLifecycle::follow_group_plan() {
  std::shared_ptr<const GroupPlan> plan = table_.group_plan(group_);
  if (!plan) {
    fail_with(TargetState::Failed, "its group's plan is gone");
    return;
  }
  // A plan for a library this member does not map, or maps in another
  // build (loaded after the fork, from another path): its own profile decides.
  if (std::string why = why_plan_does_not_fit(*plan); !why.empty()) {
    log::info("target {} pid {}: its group's plan does not fit it ({}): profiled on its own", name_, pid_, why);
    {
      std::lock_guard lock(injection_mutex_);  // -status reads it
      follows_ = 0;  // and its plan is not the group's
    }
    run_pipeline();
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (!move(TargetState::Profiling, TargetState::Dynimizing,
            fmt::format("follows its group's plan (counted in pid {})", plan->counted_in)))
    return;
  InjectRequest request = base_request();
  request.hot = plan->hot;
  request.callers = plan->callers;
  request.module = plan->module;
  request.counts = &plan->counts;
  layout_ = fmt::format("by counts of pid {}, its group's plan ({:.1f} s of counting copies)", plan->counted_in,
                        plan->counts.seconds);
  following_ = plan;  // its further modules follow the plan too (inject_more_modules)
  request.slot_holders = further_modules();
  Result<Injection> injected = fail("not injected");
  try {
    injected = inject_module(request);
  } catch (const std::exception& e) {  // a bug must cost this target its injection, not dynid its life
    injected = fail(std::string("internal error: ") + e.what());
  }
  seconds_optimizing_ = seconds_since(t0);
  settle_injection(std::move(injected), std::nullopt, /*then_more_modules=*/true);
}

// Why the group's plan cannot serve this member, or "": a plan for the
// executable always can (the group shares its image); one for a library
// needs that library mapped here, of the build the plan counted.
std::string TargetLifecycle::why_plan_does_not_fit(const GroupPlan& plan) const {
  if (plan.module.empty()) return "";
  return why_module_does_not_fit(plan.module, plan.counts.build_id);
}

// Why counts of `module` (a path as the maps name it) of build `build_id`
// cannot serve this member, or "".
std::string TargetLifecycle::why_module_does_not_fit(const std::string& module, const std::string& build_id) const {
  auto maps = profiler::read_maps(pid_);
  if (!maps) return maps.error().message();
  for (const profiler::Mapping& m : *maps) {
    if (!m.executable || m.path != module) continue;
    auto notes = elf::ElfFile::open_notes(fmt::format("/proc/{}/map_files/{:x}-{:x}", pid_, m.start, m.end));
    if (!notes) return notes.error().message();
    if (notes->build_id() != build_id)
      return fmt::format("{} is build {} here, the plan's is {}", module, notes->build_id(), build_id);
    return "";
  }
  return module + " is not mapped";
}

// What every injection into this target asks, whatever its code.
InjectRequest TargetLifecycle::base_request() const {
  InjectRequest request;
  request.options = dynimize_.jit();
  request.pid = pid_;
  request.image = image_;
  request.start_time = start_time_;
  request.single_threaded = as_parent_;
  request.shared_counters = with_descendants_;  // the work is in what it forks
  request.small_cache_bytes = dynimize_.small_cache_bytes;
  return request;
}

// Where an injection leaves the target (dynimizing → dynimized, or failed
// with every entry back); true when dynimized.
bool TargetLifecycle::settle_injection(Result<Injection> injected, std::optional<double> share_copied,
                                       bool then_more_modules) {
  if (!injected) {
    fail_injection(injected.error().message());
    return false;
  }
  std::string error = injected->error;
  if (error.empty() && count_of(injected->patched, PatchKind::Entry) == 0)  // pads alone reach nothing
    error = "no entry could be patched" + first_reason(injected->skipped);
  if (!error.empty() && !injected->patched.empty()) {
    if (auto undone = undo_patches(*injected); !undone) error += "; undo failed too: " + undone.error().message();
  }
  Injection& kept = *injected;
  if (!kept.plan.is_null()) {
    std::lock_guard lock(mutex_);
    plan_ = kept.plan;
    plan_["injected"] = true;
    plan_["sampled_cpu_accepted_percent"] = share_copied ? nlohmann::json(*share_copied) : nlohmann::json(nullptr);
  }
  auto huge = huge_page_bytes(pid_, kept.cache);  // outside the lock: smaps is slow to read
  {
    std::lock_guard lock(injection_mutex_);
    injection_ = std::move(kept);
    if (huge) huge_page_bytes_ = *huge;
  }
  // After injection_ holds what was patched: -undo reaches it whatever happens here.
  if (!injection_->copies.empty()) note_copies(*injection_, "optimized");
  if (!error.empty()) {
    settle_after_failure(TargetState::Dynimizing,
                         fmt::format("injection: {}; the cache stays mapped at {:#x}", error, injection_->cache.addr));
    return false;
  }
  // The further modules go in while the target is still dynimizing, with
  // the first kept: -undo cannot come between them (it waits for
  // `dynimized`), and a failure from here on is settled with the patches
  // -undo reaches (run()).
  if (then_more_modules) inject_more_modules(*injection_);
  // Every module's counting cache ends before the target is dynimized
  // (-undo and -redo wait for that: no two windows of dynid's at once).
  end_counting();
  // One line an operator can act on: what, how much, how long the target was held.
  std::string why = fmt::format("{} functions of {} patched, {} skipped, {} indirect calls promoted, {} call sites re-pointed, "
                                "{} bytes of code at {:#x} ({} KiB of the cache on huge pages{}{}); {} patch windows, "
                                "longest stop {:.1f} ms; {:.1f} s profiling, {:.1f} s counting and jit",
                                count_of(injection_->patched, PatchKind::Entry), paths::file_name(injection_->module),
                                injection_->skipped.size(),
                                injection_->promoted_calls, count_of(injection_->patched, PatchKind::CallSite),
                                injection_->code_size, injection_->code_addr, huge_page_bytes_.value_or(0) >> 10,
                                injection_->cache.huge_note.empty() ? "" : ": ", injection_->cache.huge_note,
                                injection_->patch_windows, injection_->longest_stop.count() / 1000.0,
                                seconds_profiling_, seconds_optimizing_);
  log::info("target {} pid {}: dynimized: {}", name_, pid_, why);
  return move(TargetState::Dynimizing, TargetState::Dynimized, why);
}

// The counting phase (counting_phase.h): counting copies of the hot set
// until their counts are stable; the counts, or why there are none (the
// phase is ended then, or the counting cache was never made).
Result<CountingPhase::Counts> TargetLifecycle::count_hot_set(const InjectRequest& request) {
  auto phase = CountingPhase::start(request);
  if (!phase) return std::unexpected(phase.error());
  CountingPhase* counting = phase->get();
  {
    std::lock_guard lock(counting_mutex_);
    counting_ = std::move(*phase);
  }
  note_copies(counting->injection(), "counting");
  if (!counting->injection().plan.is_null()) {  // -profile's plan until the optimized one replaces it
    std::lock_guard lock(mutex_);
    plan_ = counting->injection().plan;
    plan_["injected"] = true;
    plan_["tier"] = "counting";
  }
  const Injection& made = counting->injection();
  log::info("target {} pid {}: counting: {} entries on counting copies, {} counter sites, {} bytes of code at {:#x}; "
            "{} patch windows, longest stop {:.1f} ms; at most {} s, counting {} % of the time",
            name_, pid_, count_of(made.patched, PatchKind::Entry), made.counter_sites.size(), made.code_size, made.code_addr,
            made.patch_windows, made.longest_stop.count() / 1000.0, dynimize_.counting_max.count(),
            dynimize_.counting_duty_percent);
  count_more_modules(*counting);
  CountingPhase::Bounds bounds{dynimize_.counting_min, dynimize_.counting_max, dynimize_.counting_duty_percent};
  auto counts = counting->count(bounds, [this] { return stop_.load(); });
  if (!counts) return counts;
  nlohmann::json state = counting->to_json();
  log::info("target {} pid {}: counted for {:.1f} s in a phase of {:.1f} s ({} pauses, {} module(s)): {}", name_, pid_,
            counts->first.seconds, state.value("seconds", 0.0), state.value("pauses", 0), 1 + counts->more.size(),
            state.value("phase", ""));
  return counts;
}

// perf's map of these copies (perf_map.h): -status -json says where, or
// why not; where each came from, for dyni -addr2orig (copy_origins.h); and
// gdb's symbol file of the cache (gdb_symbols.h).
void TargetLifecycle::note_copies(const Injection& in, const std::string& tier) {
  try {
    write_copy_files(in, tier);
  } catch (const std::exception& e) {  // files for people: never the target's state
    log::warn("target {} pid {}: perf map, origins or gdb file: {}", name_, pid_, e.what());
  }
}

void TargetLifecycle::write_copy_files(const Injection& in, const std::string& tier, bool gdb_file) {
  const std::vector<CopyRange>& copies = in.copies;
  auto gdb = gdb_file ? save_cache_symbol_file(in, tier) : fail("");
  if (gdb_file && !gdb) log::warn("target {} pid {}: gdb's symbol file: {}", name_, pid_, gdb.error().message());
  std::vector<CopyOrigin> origins;
  for (const CopyRange& c : copies) origins.push_back({c.cache_addr, c.size, c.original_entry, tier, c.name, c.lines});
  if (auto saved = append_origins(pid_, start_time_, origins); !saved)
    log::warn("target {} pid {}: copies' origins for dyni -addr2orig: {}", name_, pid_, saved.error().message());
  auto written = write_perf_map(pid_, start_time_, copies);
  if (!written) log::warn("target {} pid {}: perf map: {}", name_, pid_, written.error().message());
  std::lock_guard lock(injection_mutex_);
  perf_map_ = written ? *written : "";
  perf_map_here_ = written ? perf_map_seen_here(pid_) : PerfMapHere{};
  perf_map_error_ = written ? "" : written.error().message();
  if (!gdb_file) return;
  gdb_command_ = gdb ? *gdb : "";
  gdb_error_ = gdb ? "" : gdb.error().message();
}

// An adopted cache's perf map, origins and gdb file. A target this host's
// dynid dynimized before it restarted has them (its origins file, by pid and
// start time, is there): their paths are reported. Any other (a child forked
// from a dynimized process, files lost) gets them made from its memory
// (adopted_copies.h), without line tables.
void TargetLifecycle::note_adopted_copies(const AdoptedCache& cache) {
  try {
    write_adopted_copy_files(cache);
  } catch (const std::exception& e) {  // files for people: never the target's state
    log::warn("target {} pid {}: the adopted cache's perf map or origins: {}", name_, pid_, e.what());
  }
}

namespace {

// The symbol file that process (pid, start_time) had made of `record`'s
// cache of `module` (gdb_symbols.h), or "": its first module's file is
// untagged, each further one's tagged with its module's file name, and the
// module that comes first in an adopting dynid (the most live patches) need
// not be the one that came first in the maker. So the tagged name, else the
// untagged one, each only if its .text is the record's code (a file never
// written for a failed injection must not name another cache's).
std::string symbol_file_of(pid_t pid, uint64_t start_time, const std::string& tier, const std::string& module,
                           const CacheRecord& record) {
  if (module.empty()) return "";
  for (const std::string& tag : {"-" + std::string(paths::file_name(module)), std::string()}) {
    std::string file = cache_symbol_file_path(pid, start_time, tier, tag);
    if (::access(file.c_str(), F_OK) != 0) continue;
    auto elf = elf::ElfFile::open_notes(file);  // dynid's own file (root's, 0600): headers only
    const elf::Section* text = elf ? elf->find_section(".text") : nullptr;
    if (text && text->addr == record.cache_addr + record.code_offset) return file;
  }
  return "";
}

// A forked child's cache is its parent's: so is the symbol file.
std::string parents_symbol_file(pid_t pid, const std::string& tier, const std::string& module, const CacheRecord& record) {
  auto stat = read_proc_stat("/proc", pid);
  auto parent = stat ? read_proc_stat("/proc", stat->ppid) : fail("");
  return parent ? symbol_file_of(stat->ppid, parent->start_time, tier, module, record) : "";
}

}  // namespace

void TargetLifecycle::write_adopted_copy_files(const AdoptedCache& cache) {
  const CacheRecord& record = *cache.record;
  const std::string& module = cache.module;
  const bool first = cache.first;
  const std::string tier = record.tier == CacheTier::Counting ? "counting" : "optimized";
  if (cache.makers_files) {
    const std::string gdb = symbol_file_of(pid_, start_time_, tier, module, record);
    std::vector<CopyRange> copies = copies_from_origins(origins_path(pid_, start_time_), record, tier);
    std::lock_guard lock(injection_mutex_);
    if (!copies.empty())
      adopted_copies_.push_back(
          ParentCopies{record.cache_addr, std::move(copies), first ? huge_page_bytes_ : std::nullopt, ""});
    perf_map_ = fmt::format("/tmp/perf-{}.map", pid_);
    perf_map_here_ = perf_map_seen_here(pid_);
    set_gdb_command(first, record.cache_addr, gdb.empty() ? "" : "add-symbol-file " + gdb,
                    gdb.empty() ? "no symbol file left by the dynid that made the cache" : "");
    return;
  }
  // No symbol file of its own (it would hold unwind rows read from the
  // target, for a root gdb to parse): a forked child has its caches where
  // its parent has them, and the parent's files serve.
  if (ParentCopies* parent = inherited_ ? copies_at(parent_copies_, record.cache_addr) : nullptr) {
    // Forked from a target this dynid dynimized: the same cache at the
    // same address, so the parent's copies (a child per connection must
    // cost little: issue 21 item 3), and its word for the symbol file.
    Injection in = from_record(pid_, start_time_, record);
    in.copies = std::move(parent->copies);
    write_copy_files(in, tier, /*gdb_file=*/false);
    std::string gdb = parent->gdb_command;
    if (gdb.empty())  // not written yet when the parent handed its copies over
      if (std::string file = parents_symbol_file(pid_, tier, module, record); !file.empty()) gdb = "add-symbol-file " + file;
    std::lock_guard lock(injection_mutex_);
    set_gdb_command(first, record.cache_addr, gdb, gdb.empty() ? "no symbol file: its parent has none for this cache" : "");
    return;
  }
  auto copies = adopted_copies(pid_, record);
  if (!copies) {
    log::warn("target {} pid {}: the adopted cache's copies for perf and -addr2orig: {}", name_, pid_,
              copies.error().message());
    return;
  }
  Injection in = from_record(pid_, start_time_, record);
  in.copies = std::move(copies->copies);
  write_copy_files(in, tier, /*gdb_file=*/false);
  const std::string gdb = parents_symbol_file(pid_, tier, module, record);
  std::lock_guard lock(injection_mutex_);
  set_gdb_command(first, record.cache_addr, gdb.empty() ? "" : "add-symbol-file " + gdb,
                  gdb.empty() ? "no symbol file: the cache was adopted, and its maker's file is not there" : "");
}

// How gdb loads an adopted cache's symbols: the first module's in
// gdb_command_, a further module's in more_gdb_commands_.
void TargetLifecycle::set_gdb_command(bool first, uint64_t cache_addr, const std::string& command,
                                      const std::string& error) {
  if (!first) {
    if (!command.empty()) more_gdb_commands_[cache_addr] = command;
    return;
  }
  gdb_command_ = command;
  gdb_error_ = error;
}

// The latest counts of each listed name, for dyni-scan --counts (one file a
// name: bounded). After the switch: writing them took 1-2 s on a loaded host.
void TargetLifecycle::save_counts(const jit::ModuleCounts& counts) {
  std::lock_guard lock(counting_mutex_);
  if (!counting_) return;
  counting_->save_counts(counts, counts_path(module_is_executable_ ? "" : module_));
  if (auto j = counting_->to_json(); !j["counts_file_error"].get<std::string>().empty())
    log::warn("target {} pid {}: counts not saved: {}", name_, pid_, j["counts_file_error"].get<std::string>());
}

// The further modules' counts beside the first's (all_hot_modules), once
// they are injected.
void TargetLifecycle::save_more_counts() {
  std::lock_guard lock(counting_mutex_);
  if (!counting_) return;
  for (const auto& [path, counts] : more_counts_) counting_->save_counts(counts, counts_path(path), path);
}

// Where a module's counts go: one file a listed name and module, a
// library's beside the executable's ("xz@liblzma.so.5.4.1.json"; "":
// the executable).
std::string TargetLifecycle::counts_path(const std::string& library) const {
  std::string file = name_ + (library.empty() ? "" : "@" + std::string(paths::file_name(library)));
  std::replace(file.begin(), file.end(), '/', '_');
  return paths::state_dir() + "/counts/" + file + ".json";
}

// Ends the counting phase, if any, retrying a few windows apart: a thread in
// uninterruptible sleep (fsync) can make a window fail, and entries left on
// counting copies would count for good.
void TargetLifecycle::end_counting() {
  std::lock_guard lock(counting_mutex_);
  if (!counting_) return;
  for (int attempt = 0; attempt < 5 && !counting_->end(); ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

Result<std::string> TargetLifecycle::stop_counting() {
  std::lock_guard lock(counting_mutex_);
  if (!counting_) return fail("being dynimized; run dyni -undo again in a few seconds");
  auto stopped = counting_->stop();
  if (!stopped) return std::unexpected(stopped.error());
  ++undo_count_;
  move(TargetState::Dynimizing, TargetState::Undone, "dyni -undo during counting");
  log::info("target {} pid {}: undone during counting: {}", name_, pid_, *stopped);
  return fmt::format("{} (pid {}): {}", name_, pid_, *stopped);
}

nlohmann::json TargetLifecycle::counting_json() const {
  // Never waits for end_counting()'s windows and retries: the last answer.
  std::unique_lock lock(counting_mutex_, std::try_to_lock);
  std::lock_guard last(last_counting_json_mutex_);
  if (lock.owns_lock()) last_counting_json_ = counting_ ? counting_->to_json() : nlohmann::json(nullptr);
  return last_counting_json_;
}

void TargetLifecycle::fail_injection(const std::string& reason) {
  log::warn("target {} pid {}: failed: injection: {} (the target runs its original code)", name_, pid_, reason);
  move(TargetState::Dynimizing, TargetState::Failed, "injection: " + reason);
}

// After a failure with entries patched, the state says what is live: failed
// only when every entry has its original bytes; else dynimized (partly), so
// that -undo reaches it.
void TargetLifecycle::settle_after_failure(TargetState from, const std::string& reason) {
  std::size_t live = live_patches(pid_, injection_->patched);
  if (live == 0) {
    log::warn("target {} pid {}: failed: {} (the target runs its original code)", name_, pid_, reason);
    move(from, TargetState::Failed, reason);
    return;
  }
  std::string why = fmt::format("partly: {} patches (entries and call sites) live after an error: {}; dyni -undo restores them", live, reason);
  log::warn("target {} pid {}: {}", name_, pid_, why);
  move(from, TargetState::Dynimized, why);
}

// This target's state, in the table, unless the process exec'd since.
// A lifecycle asked to stop (retiring: its target left the pipeline) moves
// no state: its target may be back in the table already as a new entry of
// the same process, which is not this lifecycle's to settle.
bool TargetLifecycle::move(TargetState from, TargetState to, const std::string& why) {
  if (stop_) return false;
  return table_.transition(pid_, start_time_, from, to, why, image_);
}

// The process exited (or exec'd) since this lifecycle began: -undo and
// -redo have nothing left to do there, which is no failure.
// Only when that is certain: a leader that called pthread_exit shows as a
// zombie while its other threads run on (and patched), and a stat that could
// not be read for another reason (dynid out of descriptors) proves nothing.
bool TargetLifecycle::gone() const {
  std::string dir = fmt::format("/proc/{}", pid_);
  if (::access(dir.c_str(), F_OK) != 0) return errno == ENOENT || errno == ESRCH;
  auto st = read_proc_stat("/proc", pid_);
  if (!st) return false;
  if (st->start_time != start_time_ || (st->image && image_ && st->image != image_)) return true;
  if (st->state != 'Z' && st->state != 'X') return false;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
    auto ts = read_proc_stat(dir + "/task", static_cast<pid_t>(std::atoi(task.path().filename().c_str())));
    if (!ts || (ts->state != 'Z' && ts->state != 'X')) return false;  // a thread runs on
  }
  return !ec;
}

Result<std::string> TargetLifecycle::undo() {
  std::lock_guard lock(injection_mutex_);
  if (!injection_) return fail("nothing was injected");
  // Every module is tried; undone only when every one is (a second -undo
  // tries those left).
  std::vector<std::string> failed;
  const std::string more = undo_more_modules(failed);
  std::vector<uint64_t> probed;  // patches a uprobe had touched (undo_patches)
  if (auto r = undo_patches(*injection_, false, &probed); !r)
    failed.insert(failed.begin(), std::string(paths::file_name(injection_->module)) + ": " + r.error().message());
  {
    // Counting copies whose phase could not be ended then (every window
    // missed): no entry may lead to them under `undone`.
    std::lock_guard counting(counting_mutex_);
    if (counting_ && !counting_->end()) failed.push_back("counting copies: could not be ended now");
  }
  if (!failed.empty()) {
    if (gone()) return fmt::format("{} (pid {}): exited, nothing to undo", name_, pid_);
    std::string which;
    for (const std::string& f : failed) which += (which.empty() ? "" : "; ") + f;
    return fail("undo: " + which);
  }
  ++undo_count_;
  const std::string probes =
      probed.empty() ? ""
                     : fmt::format("; {} of them held a uprobe's int3 or byte over dyni's jump (or another tool's; "
                                   "first at {:#x}): the file's bytes are back around it, the int3 is left to its owner",
                                   probed.size(), probed.front());
  move(TargetState::Dynimized, TargetState::Undone, "dyni -undo" + probes);
  const std::size_t entries = count_of(injection_->patched, PatchKind::Entry);
  const std::size_t calls = count_of(injection_->patched, PatchKind::CallSite);
  log::info("target {} pid {}: undone: {} entries and {} call sites have their original bytes{}{}", name_, pid_, entries,
            calls, more, probes);
  return fmt::format("{} (pid {}): original code restored ({} entries, {} call sites{}){}", name_, pid_, entries, calls,
                     more, probes);
}

Result<std::string> TargetLifecycle::redo() {
  std::lock_guard lock(injection_mutex_);
  if (!injection_) {
    std::lock_guard counting(counting_mutex_);
    if (counting_ && counting_->stopped())
      return fail("counting was stopped by dyni -undo before any optimized code was made: nothing to redo "
                  "(restart dynid to optimize it again)");
    return fail("nothing was injected");
  }
  auto again = redo_patches(*injection_);
  // Pads an undo left (a thread was there) count as patched: entries decide.
  const bool none = !again || count_of(again->patched, PatchKind::Entry) == 0;
  if (none && gone()) return fmt::format("{} (pid {}): exited, nothing to redo", name_, pid_);
  if (!again) return fail("redo: " + again.error().message());
  if (none)
    return fail("redo: no entry could be patched" +
                (again->error.empty() ? first_reason(again->skipped) : " (first reason: " + again->error + ")"));
  ++redo_count_;
  injection_->patch_windows += again->patch_windows;
  if (again->longest_stop > injection_->longest_stop)
    injection_->longest_stop = again->longest_stop, injection_->longest_window = again->longest_window;
  std::size_t more_entries = 0, more_calls = 0;
  const std::string more = redo_more_modules(more_entries, more_calls);
  std::string what = fmt::format("{} of {} entries and {} of {} call sites patched{}{}",
                                 count_of(again->patched, PatchKind::Entry), count_of(injection_->patched, PatchKind::Entry),
                                 count_of(again->patched, PatchKind::CallSite),
                                 count_of(injection_->patched, PatchKind::CallSite),
                                 again->error.empty() ? "" : " (stopped early: " + again->error + ")", more);
  move(TargetState::Undone, TargetState::Dynimized, "dyni -redo: " + what);
  log::info("target {} pid {}: redone: {}", name_, pid_, what);
  return fmt::format("{} (pid {}): optimized code back in ({})", name_, pid_, what);
}

namespace {

// How many `names`, and the first five.
nlohmann::json count_and_examples(std::vector<std::string> names) {
  const std::size_t n = names.size();
  names.resize(std::min<std::size_t>(n, 5));
  return {{"count", n}, {"examples", names}};
}

// The functions whose entry patch sits at their first byte over anything but
// a jmp rel32 (neither a kept first instruction nor endbr64 before it,
// jit/patch_plan.h): a uprobe attached at one of them after injection would
// land on dyni's jmp. This dyni makes none; an older one's, adopted, may.
nlohmann::json entries_at_first_byte(const Injection& in) {
  std::set<uint64_t> at;
  for (const PatchRecord& p : in.patched)
    if (p.kind == PatchKind::Entry && p.original[0] != jit::kJmpRel32Opcode) at.insert(p.addr);
  std::vector<std::string> names;
  for (const CopyRange& c : in.copies)
    if (at.count(c.original_entry)) names.push_back(c.name);
  return count_and_examples(std::move(names));
}

// The patched functions whose entry jmp begins where an instruction of the
// file does (probe_safe_entries = false, jit/patch_plan.h): a uprobe
// attached there after injection (uprobe:FUNC+N) would land on dyni's jmp.
// null where that is not known (a cache adopted from its record).
nlohmann::json entries_unsafe_for_uprobes(const Injection& in) {
  std::set<uint64_t> patched;
  for (const PatchRecord& p : in.patched)
    if (p.kind == PatchKind::Entry) patched.insert(p.addr);
  std::vector<std::string> names;
  for (const CopyRange& c : in.copies) {
    if (!c.entry_probe_safe) return nullptr;
    if (!*c.entry_probe_safe && patched.count(c.entry_patch)) names.push_back(c.name);
  }
  return count_and_examples(std::move(names));
}

}  // namespace

bool TargetLifecycle::has_perf_map() const {
  std::lock_guard lock(injection_mutex_);
  return !perf_map_.empty();
}

PerfMapHere TargetLifecycle::perf_map_here() const {
  std::lock_guard lock(injection_mutex_);
  return perf_map_here_;
}

nlohmann::json TargetLifecycle::injection_json() const {
  std::lock_guard lock(injection_mutex_);
  if (!injection_) return nullptr;
  const Injection& in = *injection_;
  std::map<std::string, std::size_t> skipped = skipped_by_kind(in.skipped);

  return {{"adopted", adopted_},
          // How it came to be dynimized: its own profile and counts, its group's plan, or found in it.
          {"via", inherited_ ? "inherited" : adopted_ ? "adopted" : follows_ ? "group plan" : "injected"},
          {"plan_counted_in", follows_ ? nlohmann::json(follows_) : nlohmann::json(nullptr)},
          // The module its copies came from (the executable, or a library), as the target maps it.
          {"module", in.module.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.module)},
          // A library's: still loaded where its copies were made for (false: unloaded, its patches with it).
          {"module_loaded", library_loaded(in)},
          {"functions_patched", count_of(in.patched, PatchKind::Entry)},
          {"entries_at_first_byte", entries_at_first_byte(in)},
          {"entries_unsafe_for_uprobes", entries_unsafe_for_uprobes(in)},
          {"call_sites_repointed", count_of(in.patched, PatchKind::CallSite)},
          {"got_slots_repointed", in.slots_patched.size()},
          {"functions_copied", in.copies.size()},
          {"promoted_calls", in.promoted_calls},
          // Left in the original code by policy (a USDT probe site), each named.
          {"kept_out", in.plan.is_object() ? in.plan.value("kept_out", nlohmann::json::array()) : nlohmann::json::array()},
          {"skipped", skipped},
          {"skipped_examples", std::vector<std::string>(in.skipped.begin(),
                                                        in.skipped.begin() + std::min<std::size_t>(5, in.skipped.size()))},
          {"cache", {{"addr", fmt::format("{:#x}", in.cache.addr)},
                     {"bytes", in.cache.length},
                     {"code_bytes", in.code_size},
                     {"huge_page_bytes", huge_page_bytes_ ? nlohmann::json(*huge_page_bytes_) : nlohmann::json(nullptr)},
                     {"huge_page_advised", in.cache.huge_advised},
                     {"huge_page_note", in.cache.huge_note},
                     {"unmapped", false},
                     {"kept_because", kCacheKeptBecause}}},
          {"frames_registered", in.frames_registered},
          {"perf_map", perf_map_.empty() ? nlohmann::json(nullptr) : nlohmann::json(perf_map_)},
          {"perf_map_error", perf_map_error_},
          {"gdb_command", gdb_command_.empty() ? nlohmann::json(nullptr) : nlohmann::json(gdb_command_)},
          {"gdb_error", gdb_error_},
          {"layout", layout_},
          {"longest_stop_ms", in.longest_stop.count() / 1000.0},
          {"patch_windows", in.patch_windows},
          {"longest_patch_window", {{"threads", in.longest_window.threads},
                                    {"entries_written", in.longest_window.writes},
                                    {"stop_ms", in.longest_window.stop.count() / 1000.0},
                                    {"unwind_ms", in.longest_window.unwind.count() / 1000.0},
                                    {"check_ms", in.longest_window.check.count() / 1000.0},
                                    {"write_ms", in.longest_window.write.count() / 1000.0},
                                    {"release_ms", in.longest_window.release.count() / 1000.0}}},
          {"seconds_profiling", seconds_profiling_},
          {"seconds_optimizing", seconds_optimizing_},
          {"undo_count", undo_count_},
          {"redo_count", redo_count_},
          {"error", in.error},
          // [options] all_hot_modules: the other modules' caches (lifecycle_more_modules.cpp).
          {"more_modules", more_modules_json()}};
}

// Lays out the hot code (jit/pipeline.h). Only reported for now: a plan that
// fails is logged and the target stays as it is, untouched.
void TargetLifecycle::plan_cache() {
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  // The recorder is finished: nothing changes it any more, so the jit reads it
  // without the lock and status requests are not held up meanwhile.
  Result<nlohmann::json> plan = fail("not planned");
  try {
    plan = plan_code_cache(pid_, *recorder, module_, dynimize_.jit());
  } catch (const std::exception& e) {  // a bug must cost this target its plan, not dynid its life
    plan = fail(std::string("internal error: ") + e.what());
  }
  std::lock_guard lock(mutex_);
  if (!plan) {
    log::warn("target {} pid {}: jit: {}", name_, pid_, plan.error().message());
    plan_ = {{"error", plan.error().message()}};
    return;
  }
  plan_ = *plan;
  log::info("target {} pid {}: jit: {} functions ({:.1f}% of sampled CPU), {} bytes of cache, {} entries to patch, "
            "{:.2f} s (not injected yet)",
            name_, pid_, plan_["functions"].get<std::size_t>(), plan_["sampled_cpu_accepted_percent"].get<double>(),
            plan_["cache_bytes"].get<std::size_t>(), plan_["entries_patched"].get<std::size_t>(),
            plan_["seconds"].get<double>());
}

// Ends the lifecycle in `state` with `reason`, sampling stopped (unless the
// daemon is stopping it anyway).
void TargetLifecycle::fail_with(TargetState state, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (recorder_) recorder_->finish();
  }
  if (stop_) return;
  log::warn("target {} pid {}: {}: {}", name_, pid_, state_name(state), reason);
  move(TargetState::Profiling, state, reason);
}

Status TargetLifecycle::start_profiling() {
  auto recorder = profiler::Recorder::start(pid_, options_);
  if (!recorder) return std::unexpected(recorder.error());
  if (with_descendants_ && (*recorder)->sampler().scope() != profiler::SamplerScope::PerCpu)
    return fail("its group's work is in the processes it forks, which only system-wide sampling sees, and that "
                "is not allowed here");
  log::info("target {} pid {}: sampling {} threads{} with {} at {} Hz", name_, pid_,
            (*recorder)->sampler().stats().threads,
            options_.sampler.descendants
                ? fmt::format(" with {} members of its group and what they all fork", options_.sampler.relatives.size())
                : "",
            (*recorder)->sampler().event_name(),
            options_.sampler.frequency_hz);
  std::lock_guard lock(mutex_);
  recorder_ = std::move(*recorder);
  return ok();
}

// The executable must parse completely, as dyni will read it (I9): else the
// target is unsupported. Uses the module the symbolizer already read.
Status TargetLifecycle::check_executable() {
  auto exe = read_exe("/proc", pid_);
  if (!exe) return std::unexpected(exe.error());
  std::lock_guard lock(mutex_);
  for (const auto& m : recorder_->symbolizer().modules()) {
    if (m.path != exe->path) continue;
    if (!m.error.empty()) return fail("executable " + m.path + ": " + m.error);
    return ok();
  }
  return fail("executable " + exe->path + " is not mapped executable");
}

// Chooses the module whose hot code is optimized (cache_plan.h
// choose_module); false when there is none, the target then unsupported
// with the reason by module.
bool TargetLifecycle::choose_hot_module() {
  auto exe = read_exe("/proc", pid_);
  if (!exe) {
    fail_with(TargetState::Failed, "profiling: " + exe.error().message());
    return false;
  }
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  // The recorder is finished: read without the lock (files are read here,
  // and status requests take it).
  const profiler::Symbolizer& symbols = recorder->symbolizer();
  auto why_stays = [&](const std::string& path) {
    std::string why = why_module_stays(symbols, path, exe->path);
    if (!why.empty() || path == exe->path) return why;
    // A library as the injection will read it (mapped once, its unwind
    // tables and GOT slots): else the next module is tried, not a failure.
    auto module = inject::read_target_module(pid_, symbols, path);
    return module ? std::string() : module.error().message();
  };
  ModuleChoice choice =
      choose_module(module_shares(recorder->profile(), symbols), exe->path, why_stays, dynimize_.all_hot_modules,
                    dynimize_.min_module_share);
  // Unsupported is for good: a profile cut short by its time bound with few
  // samples (a burst of load) decides nothing; its executable is tried, and
  // the steps after say what such a profile gives.
  if (choice.path.empty() && !recorder->stable() && recorder->profile().total() < kMinSamplesForUnsupported)
    choice = {exe->path, true, "", {}, {}};
  if (choice.path.empty()) {
    fail_with(TargetState::Unsupported, choice.why_none);
    return false;
  }
  for (const std::string& passed : choice.passed_over)
    log::info("target {} pid {}: passed over {}", name_, pid_, passed);
  if (!choice.executable) log::info("target {} pid {}: its hot code is in {}: optimizing that library", name_, pid_, choice.path);
  for (const std::string& also : choice.also)
    log::info("target {} pid {}: {} is hot too: optimized after {}", name_, pid_, also, paths::file_name(choice.path));
  std::lock_guard lock(mutex_);  // profile_json reads it
  module_ = choice.path;
  module_is_executable_ = choice.executable;
  more_modules_ = choice.also;
  return true;
}

// Samples until the hot set is stable, the time bound passes, or we are stopped.
Status TargetLifecycle::profile_until_stable() {
  for (;;) {
    std::this_thread::sleep_for(kStepInterval);
    if (stop_) return ok();
    std::lock_guard lock(mutex_);
    if (auto r = recorder_->step(); !r) return r;
    if (recorder_->done()) break;
  }
  std::lock_guard lock(mutex_);
  recorder_->finish();
  const auto& p = recorder_->profile();
  log::info("target {} pid {}: profile {} after {:.1f} s: {} samples, {} lost, {} functions, "
            "{} cover 90%, {} cover 99%",
            name_, pid_, recorder_->stable() ? "stable" : "time bound reached",
            recorder_->to_json(0)["seconds"].get<double>(), p.total(),
            recorder_->sampler().stats().lost, p.functions().size(), p.hot_set(0.9).size(),
            p.hot_set(0.99).size());
  return ok();
}

nlohmann::json TargetLifecycle::profile_json(std::size_t top_n) const {
  nlohmann::json j;
  // The share of each further module's hot samples its plan copied (read
  // first: the locks are never held together).
  std::map<std::string, double> accepted_in_more;
  {
    std::lock_guard lock(injection_mutex_);
    for (const Injection& in : more_)
      if (in.error.empty() && in.plan.is_object() && in.plan.value("sampled_cpu_accepted_percent", nlohmann::json()).is_number())
        accepted_in_more[in.module] = in.plan["sampled_cpu_accepted_percent"].get<double>();
  }
  {
    std::lock_guard lock(mutex_);
    if (!recorder_) return nullptr;
    j = recorder_->to_json(top_n);
    if (!plan_.is_null()) j["jit"] = plan_;
    // Each module's share of the samples, those optimized, and the share of
    // all sampled CPU their copies took over, each and in all (issue 22):
    // a module's share times the share of its hot samples its plan copied.
    const nlohmann::json first = plan_.is_object() ? plan_.value("sampled_cpu_accepted_percent", nlohmann::json()) : nlohmann::json();
    nlohmann::json modules = nlohmann::json::array();
    std::optional<double> in_copies;
    for (const auto& [path, share] : module_shares(recorder_->profile(), recorder_->symbolizer())) {
      const bool chosen = path == module_ || std::find(more_modules_.begin(), more_modules_.end(), path) != more_modules_.end();
      std::optional<double> accepted;
      if (path == module_ && first.is_number()) accepted = first.get<double>();
      if (auto more = accepted_in_more.find(path); more != accepted_in_more.end()) accepted = more->second;
      if (accepted) in_copies = in_copies.value_or(0) + share * *accepted;
      if (modules.size() < kModulesShown)
        modules.push_back({{"module", path}, {"percent", 100 * share}, {"optimized", chosen},
                           {"optimized_percent", accepted ? nlohmann::json(share * *accepted) : nlohmann::json(nullptr)}});
    }
    j["modules"] = modules;
    j["sampled_cpu_optimized_percent"] = in_copies ? nlohmann::json(*in_copies) : nlohmann::json(nullptr);
  }
  // What the counts say of the original code and of the injected layout.
  std::lock_guard lock(injection_mutex_);
  if (injection_ && injection_->count_metrics)
    j["layout_by_counts"] = {{"original", jit::to_json(injection_->count_metrics->original)},
                             {"laid_out", jit::to_json(injection_->count_metrics->laid_out)},
                             {"indirect_calls", jit::to_json(injection_->count_metrics->indirect)}};
  return j;
}

}  // namespace dyni
