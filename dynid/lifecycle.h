// One target's way through the pipeline, on a thread of its own, started
// when the target turns `profiling` (DESIGN.md §3):
//
//   profile   sample every thread (perf_event)             else profiling → failed
//   check     the executable parses completely             else profiling → unsupported
//             (sampling is stopped on every way out)
//   profile   ... until the hot set is stable             profiling → dynimizing
//   count     counting copies of the hot set, until their  (dynimizing; -status -json
//             counts are stable (counting_phase.h)          "counting"); -undo → undone
//   dynimize  lay out by the counts and inject the hot     dynimizing → dynimized
//             code, re-pointing each entry from its        else → failed, original code
//             counting copy (injector.h); counting ends
//   ([options] counting = false, or counting refused: laid out from the profile)
//
// A target that already holds a dyni cache (an earlier dynid's, or its
// parent's before a fork) is adopted from the cache's record instead:
// profiling → dynimized (or undone), never injected twice (cache_scan.h).
// A counting cache found so (a dynid killed while counting) is ended first:
// its entries back to the file's bytes, its counters off; with no optimized
// cache beside it the target is profiled afresh.
// With `dynimize = false` the plan is only logged, nothing is written.
//
// -undo and -redo come from the daemon's thread (undo(), redo()); they act
// only once the lifecycle's own thread has finished.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "dynid/cache_plan.h"
#include "dynid/cache_scan.h"
#include "dynid/counting_phase.h"
#include "dynid/injector.h"
#include "dynid/module_choice.h"
#include "dynid/perf_map.h"
#include "dynid/target_table.h"
#include "profiler/recorder.h"

namespace dyni {


// Whether the copied library is loaded now from the file its copies were
// made from, where it was: false once an unload took its patched pages (the
// copies are reached no more; a load elsewhere runs the file's code). Null
// for the executable, which only an exec replaces, cache and all.
nlohmann::json library_loaded(const Injection& in);
// " (first reason: …)" for the first of `reasons`, or "".
inline std::string first_reason(const std::vector<std::string>& reasons) {
  return reasons.empty() ? "" : " (first reason: " + reasons.front() + ")";
}

struct DynimizeOptions {
  bool dynimize = true;  // [options] dynimize: inject, or only plan
  bool counting = true;  // [options] counting
  std::chrono::seconds counting_min{1};  // [options] counting_min_seconds
  std::chrono::seconds counting_max{5};  // [options] counting_max_seconds
  int counting_duty_percent = 33;         // [options] counting_duty_percent
  bool copy_usdt_functions = false;       // [options] copy_usdt_functions
  unsigned loop_alignment = 32;           // [options] loop_alignment
  bool probe_safe_entries = true;         // [options] probe_safe_entries
  bool entry_pads = true;                 // [options] entry_pads
  bool all_hot_modules = true;            // [options] all_hot_modules
  uint64_t small_cache_bytes = kSmallCacheBytes;  // [options] small_cache_kib
  double min_module_share = kMinModuleShare;      // [options] min_module_percent / 100
  jit::JitOptions jit() const {
    jit::JitOptions o;
    o.copy_probe_functions = copy_usdt_functions;
    o.cache.probe_safe_entries = probe_safe_entries;
    o.cache.entry_pads = entry_pads;
    o.layout.loop_alignment = loop_alignment;
    return o;
  }
};

// The copies of a parent's cache, for the children that inherit it (their
// perf maps and origins, named without reading a symbol table again). A
// parent hands over one a cache: its first module's first, then each
// further module's (all_hot_modules).
struct ParentCopies {
  uint64_t cache_addr = 0;
  std::vector<CopyRange> copies;  // without their instruction tables
  std::optional<uint64_t> huge_page_bytes;  // of the cache, as measured in the parent
  std::string gdb_command;  // how gdb loads the parent's symbol file of the cache, or ""
};

class TargetLifecycle {
 public:
  // `adopt_only`: for a target that is not busy: only look for a cache of
  // dyni's in it (a restarted dynid must see an idle dynimized target, so
  // that -undo reaches it); the lifecycle ends when there is none.
  // `parent`: its parent's copies, where the parent is a target dynimized by
  // this dynid (an adopted child that inherited those caches names their
  // copies from them), the first module's first.
  TargetLifecycle(const Target& target, TargetTable& table, profiler::RecorderOptions options,
                  DynimizeOptions dynimize, bool adopt_only = false, std::vector<ParentCopies> parent = {});
  ~TargetLifecycle();  // stops the thread and waits for it (≤ one step, ~100 ms)

  pid_t pid() const { return pid_; }
  bool adopt_only() const { return adopt_only_; }
  bool finished() const { return finished_; }  // its thread has nothing more to do
  // Asks its thread to stop at its next check; the jit and a stop window run
  // to their ends first. Destroy it once finished(), so that no one waits.
  void request_stop() { stop_ = true; }
  // An adopt-only lifecycle that found a cache (and so must be kept: it
  // holds what -undo needs); read once finished().
  bool adopted() const { return adopted_; }
  // Whether dynid wrote (or adopted) perf's map of this process.
  bool has_perf_map() const;
  // That map's path in dynid's own view, or "" (dynid/perf_map.h).
  PerfMapHere perf_map_here() const;
  // Its caches' copies for a child that inherits them, once injected: the
  // first module's first (none before, nor for a cache whose copies it
  // does not know by name).
  std::vector<ParentCopies> copies_for_children() const;
  uint64_t start_time() const { return start_time_; }
  uint64_t image() const { return image_; }
  // The profile so far (or final); null before sampling started.
  nlohmann::json profile_json(std::size_t top_n) const;
  // What was injected (-status -json); null when nothing was.
  nlohmann::json injection_json() const;
  // The counting phase, while it runs and after (-status -json); null without one.
  nlohmann::json counting_json() const;
  // -undo while counting (the target is dynimizing): the counting phase
  // stops with the target on its original code (dynimizing → undone).
  // Fails when it is not counting now.
  Result<std::string> stop_counting();

  // dynimized → undone: every patched entry gets its original bytes back.
  // undone → dynimized: the entries are patched again, after the same checks.
  // Each returns a line for the operator, or why it could not.
  Result<std::string> undo();
  Result<std::string> redo();

 private:
  bool gone() const;
  bool move(TargetState from, TargetState to, const std::string& why);
  void run();
  void run_pipeline();
  bool adopt_existing_cache();
  void settle_adoption(TargetState to, const std::string& why);
  void settle_after_failure(TargetState from, const std::string& reason);
  void dynimize();
  void follow_group_plan();
  std::string why_plan_does_not_fit(const GroupPlan& plan) const;
  std::string why_module_does_not_fit(const std::string& module, const std::string& build_id) const;
  bool settle_injection(Result<Injection> injected, std::optional<double> share_copied, bool then_more_modules = false);
  InjectRequest base_request() const;
  Result<CountingPhase::Counts> count_hot_set(const InjectRequest& request);
  void replaced_counting(Injection& optimized, const Injection& counting);
  void save_counts(const jit::ModuleCounts& counts);
  void save_more_counts();
  std::string counts_path(const std::string& library) const;
  void note_copies(const Injection& in, const std::string& tier);  // never throws
  void write_copy_files(const Injection& in, const std::string& tier, bool gdb_file = true);
  // How an adopted cache is named: `module`, the path of its module, or ""
  // when it could not be matched; `first`, it is the first module's here;
  // `makers_files`, this process's origins file was there when it was adopted
  // (this dynid's maker, before a restart, wrote it).
  struct AdoptedCache {
    const CacheRecord* record = nullptr;
    std::string module;
    bool first = false;
    bool makers_files = false;
  };
  void note_adopted_copies(const AdoptedCache& cache);  // never throws
  void write_adopted_copy_files(const AdoptedCache& cache);
  void set_gdb_command(bool first, uint64_t cache_addr, const std::string& command,
                       const std::string& error);  // under injection_mutex_
  void end_counting();
  std::vector<CacheRecord> end_counting_caches(std::vector<CacheRecord> records);
  void fail_injection(const std::string& reason);
  Status start_profiling();
  Status check_executable();
  bool choose_hot_module();
  // [options] all_hot_modules (lifecycle_more_modules.cpp): after `first`,
  // the hottest module's injection, before the target is dynimized.
  void inject_more_modules(Injection& first);
  void inject_one_more_module(Injection& first, const profiler::Recorder& recorder, const std::string& path);
  void inject_more_by_plan(Injection& first, const GroupPlan& plan);
  // The further modules this target copies after its first, by path: its
  // own choice, or its group plan's for a follower.
  std::vector<std::string> further_modules() const;
  bool add_more_module(Injection& first, InjectRequest& request, const std::string& layout, const Injection* counting,
                       const jit::ModuleProfile* sampled);
  // Their counting caches in the counting phase of the first (counting_phase.h add()).
  void count_more_modules(CountingPhase& phase);
  void count_one_more_module(CountingPhase& phase, const profiler::Recorder& recorder, const std::string& path,
                             std::vector<CopyRange>& copies);
  InjectRequest more_module_request(const HotModule& hot) const;  // `hot` must outlive it
  const Injection* counting_of(const std::string& module) const;  // a further module's counting cache, or null
  // A cache's record found in the target: its module (cache_scan.h), if it
  // could be matched, and how many of its patches are live.
  struct FoundRecord {
    const CacheRecord* record = nullptr;
    std::optional<RecordModule> module;
    std::size_t live = 0;
  };
  // Adopts every other module's cache; returns how many of their patches are live.
  std::size_t adopt_more_modules(const std::vector<profiler::Mapping>& maps, const std::vector<CacheRecord>& all,
                                 const std::vector<FoundRecord>& found, const FoundRecord& first);
  std::string undo_more_modules(std::vector<std::string>& failed);
  std::string redo_more_modules(std::size_t& entries, std::size_t& calls);
  nlohmann::json more_modules_json() const;  // under injection_mutex_
  Status profile_until_stable();
  void plan_cache();
  void fail_with(TargetState state, const std::string& reason);

  pid_t pid_;
  pid_t ppid_;  // its parent when found
  uint64_t start_time_;
  std::string layout_;  // how the copies' blocks were laid out (injection_json)
  // The module optimized (module_choice.h choose_module): set by this
  // lifecycle's thread after profiling under mutex_ (profile_json reads it
  // under the lock; this thread reads it without).
  std::string module_;
  bool module_is_executable_ = true;
  // [options] all_hot_modules: the other hot modules to optimize after it,
  // hottest first (set with module_).
  std::vector<std::string> more_modules_;
  // Their counts from the counting phase, by path (this thread's alone):
  // their optimized copies are laid out by them and replace their counting copies.
  std::map<std::string, jit::ModuleCounts> more_counts_;
  // The further modules injected by their counts, for the group's plan
  // (GroupPlan::more); this thread's alone.
  std::vector<GroupPlan::Further> more_plans_;
  // The group's plan this member follows (follow_group_plan), for its
  // further modules; this thread's alone.
  std::shared_ptr<const GroupPlan> following_;
  std::string perf_map_, perf_map_error_;  // under injection_mutex_: where perf's map is, or why not
  PerfMapHere perf_map_here_;              // under injection_mutex_: perf_map_ in dynid's view (perf_map_seen_here)
  std::string gdb_command_, gdb_error_;   // under injection_mutex_: how gdb loads the cache's symbols, or why not
  uint64_t image_;
  std::string name_;
  TargetTable& table_;
  std::string group_;  // its process group's key
  // Dynimized by its group's plan (process_group.h), counted in this member;
  // 0: its own (also once the plan is found not to fit it). Written by this
  // lifecycle's thread under injection_mutex_.
  pid_t follows_;
  bool as_parent_;     // its group's parent: injected only while single-threaded (InjectRequest::single_threaded)
  bool with_descendants_;  // a leading parent: its counters shared with what it forks (process_group.h)
  profiler::RecorderOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  mutable std::mutex mutex_;  // guards recorder_ between this thread and status requests
  std::unique_ptr<profiler::Recorder> recorder_;
  nlohmann::json plan_;  // the jit's plan for the cache
  DynimizeOptions dynimize_;
  bool adopt_only_;
  TargetState started_in_;  // the target's state when this lifecycle began
  double seconds_profiling_ = 0, seconds_optimizing_ = 0;

  // What is injected; undo/redo and status requests come from the daemon's
  // thread. Set once by this lifecycle's thread, before its last transition.
  mutable std::mutex injection_mutex_;
  std::optional<Injection> injection_;
  // The further modules' injections (all_hot_modules), each its own cache,
  // or adopted from their records: -undo and -redo act on each that has no
  // error (one that failed had its patches undone then).
  std::vector<Injection> more_;
  std::map<uint64_t, std::string> more_gdb_commands_;  // by cache address: how gdb loads its symbols
  std::map<uint64_t, std::string> more_layouts_;       // by cache address: how its copies were laid out
  bool adopted_ = false;  // found in the target, not made by this dynid
  bool inherited_ = false;  // adopted, and its parent maps that cache: it came with a fork
  std::vector<ParentCopies> parent_copies_;  // set before the thread starts
  // Adopted caches' copies as their maker's origins file names them (a
  // restarted dynid): handed to the children it forks, which would each read
  // the modules' symbols otherwise. Under injection_mutex_.
  std::vector<ParentCopies> adopted_copies_;
  std::optional<uint64_t> huge_page_bytes_;  // of the cache, measured once after injection
  std::size_t redo_count_ = 0, undo_count_ = 0;

  // The counting phase: made and ended by this lifecycle's thread, stopped
  // by -undo from the daemon's (counting_mutex_ guards the pointer).
  mutable std::mutex counting_mutex_;
  mutable std::mutex last_counting_json_mutex_;  // what counting_json() last read (it never waits for windows)
  mutable nlohmann::json last_counting_json_;
  std::unique_ptr<CountingPhase> counting_;

  std::thread thread_;
};

}  // namespace dyni
