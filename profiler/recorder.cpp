// Driving a Sampler into a Profile until the hot set is stable.
#include "profiler/recorder.h"

#include <cmath>
#include <set>

namespace dyni::profiler {

double distribution_distance(const std::map<FunctionKey, uint64_t>& a, uint64_t a_total,
                             const std::map<FunctionKey, uint64_t>& b, uint64_t b_total) {
  if (a_total == 0 || b_total == 0) return 1.0;
  std::set<FunctionKey> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  double sum = 0;
  for (const auto& k : keys) {
    auto ia = a.find(k), ib = b.find(k);
    double pa = ia == a.end() ? 0 : static_cast<double>(ia->second) / static_cast<double>(a_total);
    double pb = ib == b.end() ? 0 : static_cast<double>(ib->second) / static_cast<double>(b_total);
    sum += std::fabs(pa - pb);
  }
  return sum / 2;
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
      last_check_(started_) {}

Status Recorder::step() {
  sampler_.drain([this](const Sample& s) { profile_.add(s); });
  if (auto r = sampler_.refresh_threads(); !r) return r;
  if (std::chrono::steady_clock::now() - last_check_ >= std::chrono::seconds(1)) check_stability();
  if (done() && finished_ == std::chrono::steady_clock::time_point{})
    finished_ = std::chrono::steady_clock::now();
  return ok();
}

bool Recorder::timed_out() const {
  return std::chrono::steady_clock::now() - started_ >= std::chrono::seconds(options_.max_seconds);
}

void Recorder::check_stability() {
  std::map<FunctionKey, uint64_t> counts;
  for (const auto& [key, fp] : profile_.functions()) counts[key] = fp.samples;
  last_distance_ = distribution_distance(counts, profile_.total(), last_counts_, last_total_);
  bool calm = last_distance_ < options_.stable_distance;
  calm_checks_ = calm ? calm_checks_ + 1 : 0;
  if (calm_checks_ >= 2 && profile_.total() >= options_.min_samples) stable_ = true;
  last_counts_ = std::move(counts);
  last_total_ = profile_.total();
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
  auto end = finished_ == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now()
                                                                 : finished_;
  j["seconds"] = std::chrono::duration<double>(end - started_).count();
  j["stable"] = stable_;
  j["distance"] = last_distance_;
  return j;
}

}  // namespace dyni::profiler
