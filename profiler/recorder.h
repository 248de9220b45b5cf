// Records one target's profile until the hot set is stable.
//
// Stability (a statistical criterion, not a fixed time): at most once a second,
// once `min_fresh_samples` new samples arrived, the recorder takes the hot set
// of all earlier samples (the functions covering 99 % of them) and measures its
// coverage on the new, held-out samples: an estimate of how much of the real
// CPU time that hot set covers. When at least `stable_coverage` of the new
// samples fall in the old hot set for two checks in a row, and at least `min_samples` were taken, further
// sampling would not change which code is hot. `max_seconds` bounds the whole
// recording either way. (A distance between whole distributions converges too
// slowly with sparse samples: on mariadbd at 250 Hz it was still > 2 % after 23 s.)
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

// Drains `sampler` into `profile` every 100 ms for `duration` (tools and
// benchmarks that sample for a fixed time). Fails when the target is gone.
Status sample_for(Sampler& sampler, Profile& profile, std::chrono::milliseconds duration);

struct RecorderOptions {
  SamplerOptions sampler;
  uint64_t min_samples = 1500;
  double stable_coverage = 0.95;
  uint64_t min_fresh_samples = 200;  // per check, so that one check is not mostly noise
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

  // Drains what is left and closes the perf events; the profile stays.
  void finish();

  const Profile& profile() const { return profile_; }
  const Symbolizer& symbolizer() const { return *symbolizer_; }
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
  double last_coverage_ = 0.0;
};

// The share of the samples taken since `before` (counts then) that fall in
// the functions covering `fraction` of `before`'s samples.
double hot_set_coverage(const std::map<FunctionKey, uint64_t>& before,
                        const std::map<FunctionKey, uint64_t>& now, double fraction);

}  // namespace dyni::profiler
