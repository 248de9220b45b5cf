// One target's way through the pipeline, on a thread of its own, started
// when the target turns `profiling` (DESIGN.md §3):
//
//   profile   sample every thread (perf_event)             else profiling → failed
//   check     the executable parses completely             else profiling → unsupported
//             (sampling is stopped on every way out)
//   profile   ... until the hot set is stable             profiling → dynimizing
//   dynimize  lay out and inject the hot code              (jit/ and injection: later issues)
//
// The lifecycle never touches the target's memory or threads yet: profiling
// reads /proc and perf ring buffers only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "dynid/target_table.h"
#include "profiler/recorder.h"

namespace dyni {

class TargetLifecycle {
 public:
  TargetLifecycle(const Target& target, TargetTable& table, profiler::RecorderOptions options);
  ~TargetLifecycle();  // stops the thread and waits for it (≤ one step, ~100 ms)

  pid_t pid() const { return pid_; }
  uint64_t start_time() const { return start_time_; }
  // The profile so far (or final); null before sampling started.
  nlohmann::json profile_json(std::size_t top_n) const;

 private:
  void run();
  Status start_profiling();
  Status check_executable();
  Status profile_until_stable();
  void plan_cache();
  void fail_with(TargetState state, const std::string& reason);

  pid_t pid_;
  uint64_t start_time_;
  std::string name_;
  TargetTable& table_;
  profiler::RecorderOptions options_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;  // guards recorder_ between this thread and status requests
  std::unique_ptr<profiler::Recorder> recorder_;
  nlohmann::json plan_;  // the jit's plan for the cache (a dry run until injection lands)
  std::thread thread_;
};

}  // namespace dyni
