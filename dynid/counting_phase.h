// The counting phase of a target's lifecycle (DESIGN.md §3 step 5, issue 19):
// exact counts without a PMU, from counting copies of the hot set.
//
//   start   the counting cache is injected (injector.h, counting copies
//           with their counters beside them) and the entries point at it
//   count   its counters are read every kReadInterval until the counts are
//           stable (the distribution of the counts moves less than
//           kStableDistance between two reads, twice in a row, after the
//           minimum) or the ceiling passes. Below a duty of 100 %, counting
//           runs in bursts: after each read the entries go back to the
//           file's bytes for a pause (the original code runs at full
//           speed) and are patched in again with the first injection's
//           live checks. Once counted, the entries go back to the file's
//           bytes while the optimized cache is built
//   switch  the optimized cache, laid out by the counts, is injected by the
//           caller with InjectRequest::replacing = injection(): each entry
//           re-pointed in one write, from its counting copy where a pause
//           could not put it back
//   end     entries still on counting copies go back to the file's bytes,
//           and every counter site is turned off in place, so that no
//           thread keeps counting in a loop it entered while counting
//
// With all_hot_modules each further hot module gets a counting cache of its
// own in the same phase (add()): all are read together, their counts are
// stable together, they pause and resume together, and each is replaced by
// its module's optimized cache; the phase ends once the last is.
//
// stop() (-undo during counting, from the daemon's thread) ends the phase
// with the target on its original code. A counting cache never comes back:
// nothing patches its entries again (a new dynid that finds one ends it the
// same way, lifecycle.h).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "dynid/injector.h"
#include "jit/module_counts.h"

namespace dyni {

// The functions that ran while counting (in `counts`): the optimized cache
// holds those.
std::vector<uint64_t> functions_that_ran(const jit::ModuleCounts& counts);

class CountingPhase {
 public:
  static constexpr std::chrono::milliseconds kReadInterval{500};
  static constexpr double kStableDistance = 0.02;  // L1 distance of the normalized counts
  static constexpr std::chrono::milliseconds kSlowRead{250};  // a read this long is logged (DYNID-WARN)

  // Injects the counting cache for `request`'s hot set. Fails when nothing
  // was done to the target, or when what was done is ended already.
  static Result<std::unique_ptr<CountingPhase>> start(InjectRequest request);
  ~CountingPhase();  // ends the phase if nobody did

  // A further module's counting cache (all_hot_modules; `request.module` is
  // its path), before count(). Fails when it cannot count: the module is
  // then laid out by its profile, and what was done to the target is undone
  // (or ended with the phase). The caches already in keep counting
  // meanwhile; stop() refuses while it runs (so the phase is neither
  // stopped nor ended under it).
  Status add(InjectRequest request);

  // How long the phase may last (its wall time: pauses count), and the
  // share of it the counting copies run.
  struct Bounds {
    std::chrono::seconds minimum{1}, ceiling{5};
    int duty_percent = 100;  // 100: no pauses
  };
  // The pause after a burst of kReadInterval, for `duty_percent` (1..100).
  static std::chrono::milliseconds pause_for(int duty_percent);

  // What count() returns: the first module's counts, and each further
  // module's that counts, by the path its add() named.
  struct Counts {
    jit::ModuleCounts first;
    std::map<std::string, jit::ModuleCounts> more;
  };
  // Counts until stable (not before `minimum`), the ceiling, `stopping()`
  // (dynid is stopping), or stop(): the counts, or why there are none (the
  // phase is then ended).
  Result<Counts> count(const Bounds& bounds, const std::function<bool()>& stopping);

  // From now until end() the optimized cache replaces this one: stop()
  // refuses meanwhile. False when the phase was stopped already.
  bool begin_switch();
  const Injection& injection() const { return caches_.front().injection; }  // the first module's
  // Further module `module`'s counting cache, if it counts (add()); else null.
  const Injection* injection_of(const std::string& module) const;
  // The optimized cache `optimized` re-pointed these entries: they hold its
  // jumps, which end() leaves (and need not report as bytes it does not know).
  void replaced_by(const Injection& optimized);
  // Entries still on counting copies back to the file's bytes, counters off.
  // False when a step failed (a window missed): it may be called again.
  bool end();

  // -undo while counting: the target back on its original code. When that
  // could not be done now (a window missed), it fails and counting goes on.
  Result<std::string> stop();
  bool stopped() const { return stopped_; }

  // Writes `counts` to `path` (JSON, jit/module_counts.h; replaced
  // atomically), for dyni-scan --counts; -status -json names the file, or
  // why it could not be written. The target is not touched.
  // `module`: a further module's (add()), named under its more_modules entry.
  void save_counts(const jit::ModuleCounts& counts, const std::string& path, const std::string& module = "");

  nlohmann::json to_json() const;

 private:
  // One module's counting cache. Added only by the lifecycle's thread,
  // before count(); its flags change under mutex_.
  struct Cache {
    Injection injection;
    std::string module;  // as add() named it ("" for the first)
    bool counts = true;  // false: it could not count (add() failed): only ended
    bool paused = false, ended = false;
    std::size_t sites_off = 0;
    std::string counts_file{}, counts_file_error{};  // a further module's (save_counts)
  };
  explicit CountingPhase(Injection counting) { caches_.push_back({std::move(counting), ""}); }
  bool end_locked();
  // Its entries the optimized caches did not re-point back to the file's
  // bytes, its counters off; why not, or "".
  std::string end_cache(Cache& cache);
  // The entries back to the file's bytes (no thread enters counting copies
  // then), in one window; false when it was missed.
  bool pause_locked();
  // Patched in again where the live checks allow, in one window; false when
  // none was (still paused).
  bool resume_locked();
  void stop_clock();     // counting_seconds_ takes the time since on_since_
  // Every counting module's counters, read from the target (no lock: only
  // the injections, never changed once counting began).
  Result<Counts> read_all() const;
  void set_seconds(Counts& counts) const;  // each module's: counting_seconds_
  // Sleeps `how_long` in short steps; false when dynid is stopping meanwhile
  // (a stop() meanwhile is seen under the lock afterwards).
  bool wait_paused(std::chrono::milliseconds how_long, const std::function<bool()>& stopping);

  nlohmann::json current_json() const;  // under mutex_
  mutable std::mutex last_json_mutex_;   // the last answer of to_json, for when mutex_ is held
  mutable nlohmann::json last_json_;
  mutable int64_t last_json_ms_ = 0;
  mutable std::mutex mutex_;  // guards everything below against stop() and to_json()
  std::vector<Cache> caches_;  // the first module's first
  std::atomic<bool> stopped_{false};
  bool switching_ = false, ended_ = false;
  bool adding_ = false;  // add() injects a further module's cache
  std::set<uint64_t> replaced_;  // entries the optimized cache holds now
  std::string phase_ = "counting", end_error_;
  double seconds_ = 0, last_distance_ = -1;
  int duty_percent_ = 100;
  bool paused_ = false;
  std::chrono::steady_clock::time_point on_since_ = std::chrono::steady_clock::now();
  bool clock_running_ = true;
  double counting_seconds_ = 0;  // while entries led to the counting copies
  std::size_t pauses_ = 0, entries_resumed_ = 0;
  std::chrono::steady_clock::duration longest_pause_{}, longest_resume_{};  // wall time, windows included
  bool stable_ = false;
  uint64_t total_ = 0;  // every counter summed, at the last read
  std::string counts_file_, counts_file_error_;
};

}  // namespace dyni
