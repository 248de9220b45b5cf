// The per-target pipeline thread: profile, then (later) dynimize.
#include "dynid/lifecycle.h"

#include <fmt/format.h>

#include "common/log.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"

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

// Reads the target's executable as dyni will: a file dyni cannot fully parse
// makes the target unsupported (I9), before any sampling starts.
Status TargetLifecycle::check_executable() {
  std::string exe = fmt::format("/proc/{}/exe", pid_);
  auto file = elf::ElfFile::open(exe);
  if (!file) return std::unexpected(file.error());
  auto table = elf::FunctionTable::build(*file);
  if (!table) return fail(exe + ": " + table.error().message());
  return ok();
}

void TargetLifecycle::run() {
  if (auto r = check_executable(); !r) {
    log::warn("target {} pid {}: unsupported: {}", name_, pid_, r.error().message());
    table_.transition(pid_, start_time_, TargetState::Profiling, TargetState::Unsupported,
                      r.error().message());
    return;
  }
  if (auto r = profile(); !r) {
    if (!stop_) {
      log::warn("target {} pid {}: profiling failed: {}", name_, pid_, r.error().message());
      table_.transition(pid_, start_time_, TargetState::Profiling, TargetState::Failed,
                        "profiling: " + r.error().message());
    }
    return;
  }
  if (stop_) return;
  table_.transition(pid_, start_time_, TargetState::Profiling, TargetState::Dynimizing,
                    "hot set found");
  // Dynimizing (decode, lay out, inject) arrives with the jit and injection issues.
}

// Samples until the hot set is stable, the time bound passes, or we are stopped.
Status TargetLifecycle::profile() {
  auto recorder = profiler::Recorder::start(pid_, options_);
  if (!recorder) return std::unexpected(recorder.error());
  log::info("target {} pid {}: sampling {} threads with {} at {} Hz", name_, pid_,
            (*recorder)->sampler().stats().threads, (*recorder)->sampler().event_name(),
            options_.sampler.frequency_hz);
  {
    std::lock_guard lock(mutex_);
    recorder_ = std::move(*recorder);
  }
  for (;;) {
    std::this_thread::sleep_for(kStepInterval);
    if (stop_) return ok();
    std::lock_guard lock(mutex_);
    if (auto r = recorder_->step(); !r) return r;
    if (recorder_->done()) break;
  }
  std::lock_guard lock(mutex_);
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
  return recorder_->to_json(top_n);
}

}  // namespace dyni
