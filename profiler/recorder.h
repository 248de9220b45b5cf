// Records one target's profile until the hot set is stable.
//
// Stability (a statistical criterion, not a fixed time), decided by
// StabilityCheck: each time `min_fresh_samples` new samples have arrived, it
// takes the hot set of all earlier samples (the functions covering 99 % of
// them) and measures its coverage on the new, held-out samples — an unbiased
// estimate of how much of the target's future CPU time that hot set covers.
// Stable once two consecutive windows reach `stable_coverage` and at least
// `min_samples` were taken. `max_seconds` bounds the whole recording.
//
// Why 90 % and not more: with IP samples the unseen tail is large. On mariadbd
// under sysbench (250 Hz, ~250 samples/s) the Good-Turing estimate of the
// probability mass in functions not yet seen is still 10 % after 10 s and 5 %
// after 20 s, so no hot set picked in 10 s can cover more than ~90 % of what
// follows; 95 % takes ~25 s. Later re-optimization extends the hot set.
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
  double stable_coverage = 0.90;
  uint64_t min_fresh_samples = 400;  // per window: the estimate's standard error is then ~1.5 points
  int max_seconds = 30;
};

// The stability criterion on its own (pure): fed the cumulative per-function
// counts as samples arrive, says when the hot set is stable.
class StabilityCheck {
 public:
  explicit StabilityCheck(const RecorderOptions& options) : options_(options) {}
  // Returns true once stable (and stays true).
  bool update(const std::map<FunctionKey, uint64_t>& counts, uint64_t total);
  bool stable() const { return stable_; }
  double coverage() const { return coverage_; }  // of the last window

 private:
  RecorderOptions options_;
  std::map<FunctionKey, uint64_t> window_start_;
  uint64_t window_start_total_ = 0;
  int calm_windows_ = 0;
  bool stable_ = false;
  double coverage_ = 0.0;
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
  StabilityCheck stability_;
  bool stable_ = false;
};

// The share of the samples taken since `before` (counts then) that fall in
// the functions covering `fraction` of `before`'s samples.
double hot_set_coverage(const std::map<FunctionKey, uint64_t>& before,
                        const std::map<FunctionKey, uint64_t>& now, double fraction);

}  // namespace dyni::profiler
