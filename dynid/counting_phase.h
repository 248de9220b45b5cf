// The counting phase of a target's lifecycle (DESIGN.md §3 step 5, issue 19):
// exact counts without a PMU, from counting copies of the hot set.
//
//   start   the counting cache is injected (injector.h, counting copies
//           with their counters beside them) and the entries point at it
//   count   its counters are read every kReadInterval until the counts are
//           stable (the distribution of the counts moves less than
//           kStableDistance between two reads, twice in a row, after the
//           minimum) or the ceiling passes
//   switch  the optimized cache, laid out by the counts, is injected by the
//           caller with InjectRequest::replacing = injection(): each entry
//           re-pointed from its counting copy in one write
//   end     entries still on counting copies go back to the file's bytes,
//           and every counter site is turned off in place, so that no
//           thread keeps counting in a loop it entered while counting
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
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "dynid/injector.h"
#include "jit/module_counts.h"

namespace dyni {

class CountingPhase {
 public:
  static constexpr std::chrono::milliseconds kReadInterval{500};
  static constexpr double kStableDistance = 0.02;  // L1 distance of the normalized counts
  static constexpr std::chrono::milliseconds kSlowRead{250};  // a read this long is logged (DYNID-WARN)

  // Injects the counting cache for `request`'s hot set. Fails when nothing
  // was done to the target, or when what was done is ended already.
  static Result<std::unique_ptr<CountingPhase>> start(InjectRequest request);
  ~CountingPhase();  // ends the phase if nobody did

  // Counts until stable (not before `minimum`), the ceiling, `stopping()`
  // (dynid is stopping), or stop(): the counts, or why there are none (the
  // phase is then ended).
  Result<jit::ModuleCounts> count(std::chrono::seconds minimum, std::chrono::seconds ceiling,
                                  const std::function<bool()>& stopping);

  // From now until end() the optimized cache replaces this one: stop()
  // refuses meanwhile. False when the phase was stopped already.
  bool begin_switch();
  const Injection& injection() const { return counting_; }
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
  void save_counts(const jit::ModuleCounts& counts, const std::string& path);

  nlohmann::json to_json() const;

 private:
  explicit CountingPhase(Injection counting) : counting_(std::move(counting)) {}
  bool end_locked();

  nlohmann::json current_json() const;  // under mutex_
  mutable std::mutex last_json_mutex_;   // the last answer of to_json, for when mutex_ is held
  mutable nlohmann::json last_json_;
  mutable int64_t last_json_ms_ = 0;
  mutable std::mutex mutex_;  // guards everything below against stop() and to_json()
  Injection counting_;
  std::atomic<bool> stopped_{false};
  bool switching_ = false, ended_ = false;
  std::string phase_ = "counting", end_error_;
  double seconds_ = 0, last_distance_ = -1;
  bool stable_ = false;
  std::size_t sites_off_ = 0;
  uint64_t total_ = 0;  // every counter summed, at the last read
  std::string counts_file_, counts_file_error_;
};

}  // namespace dyni
