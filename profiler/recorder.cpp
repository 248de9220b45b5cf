// Driving a Sampler into a Profile until the hot set is stable.
#include "profiler/recorder.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

namespace dyni::profiler {

double hot_set_coverage(const std::map<FunctionKey, uint64_t>& before,
                        const std::map<FunctionKey, uint64_t>& now, double fraction) {
  std::vector<std::pair<uint64_t, FunctionKey>> order;
  uint64_t before_total = 0;
  for (const auto& [k, n] : before) {
    order.push_back({n, k});
    before_total += n;
  }
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::set<FunctionKey> hot;
  uint64_t covered = 0;
  for (const auto& [n, k] : order) {
    if (static_cast<double>(covered) >= fraction * static_cast<double>(before_total)) break;
    hot.insert(k);
    covered += n;
  }
  uint64_t fresh = 0, fresh_hot = 0;
  for (const auto& [k, n] : now) {
    auto it = before.find(k);
    uint64_t added = n - (it == before.end() ? 0 : std::min(n, it->second));
    fresh += added;
    if (hot.count(k)) fresh_hot += added;
  }
  return fresh == 0 ? 0.0 : static_cast<double>(fresh_hot) / static_cast<double>(fresh);
}

Status sample_for(Sampler& sampler, Profile& profile, std::chrono::milliseconds duration) {
  auto until = std::chrono::steady_clock::now() + duration;
  auto add = [&](const Sample& s) { profile.add(s); };
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sampler.drain(add);
    if (auto r = sampler.refresh_threads(); !r) return r;
  }
  sampler.drain(add);
  return ok();
}

Result<std::unique_ptr<Recorder>> Recorder::start(pid_t pid, const RecorderOptions& options) {
  auto symbolizer = Symbolizer::for_process(pid);
  if (!symbolizer) return std::unexpected(symbolizer.error());
  auto sampler = Sampler::attach(pid, options.sampler);
  if (!sampler) return std::unexpected(sampler.error());
  return std::unique_ptr<Recorder>(new Recorder(
      std::move(*sampler), std::make_unique<Symbolizer>(std::move(*symbolizer)), options));
}

Recorder::Recorder(Sampler sampler, std::unique_ptr<Symbolizer> symbolizer,
                   const RecorderOptions& options)
    : options_(options), sampler_(std::move(sampler)), symbolizer_(std::move(symbolizer)),
      profile_(symbolizer_.get()), started_(std::chrono::steady_clock::now()),
      last_check_(started_), stability_(options) {}

Status Recorder::step() {
  sampler_.drain([this](const Sample& s) { profile_.add(s); });
  if (auto r = sampler_.refresh_threads(); !r) return r;
  if (std::chrono::steady_clock::now() - last_check_ >= std::chrono::milliseconds(250)) check_stability();
  if (done() && finished_ == std::chrono::steady_clock::time_point{})
    finished_ = std::chrono::steady_clock::now();
  return ok();
}

void Recorder::finish() {
  sampler_.drain([this](const Sample& s) { profile_.add(s); });
  sampler_.stop();
  if (finished_ == std::chrono::steady_clock::time_point{}) finished_ = std::chrono::steady_clock::now();
}

bool Recorder::timed_out() const {
  return std::chrono::steady_clock::now() - started_ >= std::chrono::seconds(options_.max_seconds);
}

bool StabilityCheck::update(const std::map<FunctionKey, uint64_t>& counts, uint64_t total) {
  if (stable_ || total - window_start_total_ < options_.min_fresh_samples) return stable_;
  if (window_start_total_ > 0) {
    coverage_ = hot_set_coverage(window_start_, counts, 0.99);
    calm_windows_ = coverage_ >= options_.stable_coverage ? calm_windows_ + 1 : 0;
    stable_ = calm_windows_ >= 2 && total >= options_.min_samples;
  }
  window_start_ = counts;
  window_start_total_ = total;
  return stable_;
}

void Recorder::check_stability() {
  std::map<FunctionKey, uint64_t> counts;
  for (const auto& [key, fp] : profile_.functions()) counts[key] = fp.samples;
  stable_ = stability_.update(counts, profile_.total());
  last_check_ = std::chrono::steady_clock::now();
}

nlohmann::json Recorder::to_json(std::size_t top_n) const {
  nlohmann::json j = profile_.to_json(top_n);
  const SamplerStats& s = sampler_.stats();
  j["event"] = sampler_.event_name();
  j["frequency_hz"] = std::min(options_.sampler.frequency_hz, max_sample_rate());
  j["lost"] = s.lost;
  j["threads"] = s.threads;
  j["threads_seen"] = s.threads_seen;
  j["processes_sampled"] = s.processes_seen;  // the target, and what it forked when followed
  auto end = finished_ == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now()
                                                                 : finished_;
  j["seconds"] = std::chrono::duration<double>(end - started_).count();
  j["stable"] = stable_;
  j["hot_set_coverage"] = stability_.coverage();
  return j;
}

}  // namespace dyni::profiler
