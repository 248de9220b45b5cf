// Records one target's profile until the hot set is stable.
//
// Stability (a statistical criterion, not a fixed time): once a second the
// recorder compares the distribution of samples over functions with the one a
// second earlier; when their total-variation distance stays below
// `stable_distance` for two checks in a row and at least `min_samples` were
// taken, further sampling would not change which code is hot. `max_seconds`
// bounds the whole recording either way.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "profiler/profile.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"

namespace dyni::profiler {

struct RecorderOptions {
  SamplerOptions sampler;
  uint64_t min_samples = 1500;
  double stable_distance = 0.02;
  int max_seconds = 30;
};

class Recorder {
 public:
  static Result<std::unique_ptr<Recorder>> start(pid_t pid, const RecorderOptions& options);

  // Drains samples and picks up new threads; call every ~100 ms.
  // Fails when the target is gone.
  Status step();
  // True once the hot set is stable or max_seconds have passed.
  bool done() const { return stable_ || timed_out(); }
  bool stable() const { return stable_; }
  bool timed_out() const;

  const Profile& profile() const { return profile_; }
  const Sampler& sampler() const { return sampler_; }
  nlohmann::json to_json(std::size_t top_n) const;

 private:
  Recorder(Sampler sampler, std::unique_ptr<Symbolizer> symbolizer, const RecorderOptions& options);
  void check_stability();

  RecorderOptions options_;
  Sampler sampler_;
  std::unique_ptr<Symbolizer> symbolizer_;  // Profile points into it: keep its address fixed
  Profile profile_;
  std::chrono::steady_clock::time_point started_, last_check_, finished_{};
  std::map<FunctionKey, uint64_t> last_counts_;
  uint64_t last_total_ = 0;
  int calm_checks_ = 0;
  bool stable_ = false;
  double last_distance_ = 1.0;
};

// Total-variation distance between two sample distributions over functions.
double distribution_distance(const std::map<FunctionKey, uint64_t>& a, uint64_t a_total,
                             const std::map<FunctionKey, uint64_t>& b, uint64_t b_total);

}  // namespace dyni::profiler
