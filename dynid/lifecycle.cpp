// The per-target pipeline thread: profile, then (later) dynimize.
#include "dynid/lifecycle.h"

#include <fmt/format.h>

#include "common/log.h"
#include "dynid/cache_plan.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {
constexpr auto kStepInterval = std::chrono::milliseconds(100);
}

TargetLifecycle::TargetLifecycle(const Target& target, TargetTable& table,
                                 profiler::RecorderOptions options)
    : pid_(target.pid), start_time_(target.start_time), name_(target.name), table_(table),
      options_(options), thread_([this] { run(); }) {}

TargetLifecycle::~TargetLifecycle() {
  stop_ = true;
  thread_.join();
}

void TargetLifecycle::run() {
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
  table_.transition(pid_, start_time_, TargetState::Profiling, TargetState::Dynimizing,
                    "hot set found");
  plan_cache();
  // Injection (write the cache, patch the entries) arrives with its issue.
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
    plan = plan_code_cache(pid_, *recorder);
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
  table_.transition(pid_, start_time_, TargetState::Profiling, state, reason);
}

Status TargetLifecycle::start_profiling() {
  auto recorder = profiler::Recorder::start(pid_, options_);
  if (!recorder) return std::unexpected(recorder.error());
  log::info("target {} pid {}: sampling {} threads with {} at {} Hz", name_, pid_,
            (*recorder)->sampler().stats().threads, (*recorder)->sampler().event_name(),
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
  std::lock_guard lock(mutex_);
  if (!recorder_) return nullptr;
  nlohmann::json j = recorder_->to_json(top_n);
  if (!plan_.is_null()) j["jit"] = plan_;
  return j;
}

}  // namespace dyni
