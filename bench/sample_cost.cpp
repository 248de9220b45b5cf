// dyni-bench-sample-cost [HZ=4000] [ROUNDS=5]: what one sample costs the
// sampled program on this machine. A thread does a fixed amount of arithmetic
// (no memory traffic, no system calls) with and without dynid's sampler on
// it, rounds alternating; the extra time divided by the samples taken is the
// cost of one sampling interrupt. Per-thread scope on a thread that never
// blocks, so no context switches are counted in. Prints each round and the
// cost per sample, and what that means at dynid's default rate.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

#include "profiler/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

double spin(uint64_t iterations) {
  auto start = Clock::now();
  volatile uint64_t sink = 0;
  uint64_t x = 1;
  for (uint64_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  sink = x;
  (void)sink;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One timed run of the work on a fresh thread; with `hz` > 0 the sampler
// samples it. Returns seconds and adds the samples taken (lost ones included:
// each was an interrupt too) to `samples`.
double timed_run(uint64_t iterations, int hz, uint64_t& samples) {
  std::atomic<bool> go{false}, done{false};
  double seconds = 0;
  std::thread worker([&] {
    while (!go.load()) std::this_thread::yield();
    seconds = spin(iterations);
    done = true;
  });
  std::optional<dyni::profiler::Sampler> sampler;
  if (hz > 0) {
    dyni::profiler::SamplerOptions options;
    options.frequency_hz = hz;
    options.scope = dyni::profiler::SamplerScope::PerThread;
    auto s = dyni::profiler::Sampler::attach(::getpid(), options);
    if (!s) {
      std::fprintf(stderr, "dyni-bench-sample-cost: %s\n", s.error().message().c_str());
      std::exit(1);
    }
    sampler.emplace(std::move(*s));
  }
  go = true;
  while (!done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (sampler) sampler->drain([](const dyni::profiler::Sample&) {});
  }
  worker.join();
  if (sampler) {
    sampler->drain([](const dyni::profiler::Sample&) {});
    samples += sampler->stats().samples + sampler->stats().lost;
  }
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int hz = argc > 1 ? std::atoi(argv[1]) : 4000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (hz <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: dyni-bench-sample-cost [HZ=4000] [ROUNDS=5]\n");
    return 2;
  }
  const uint64_t iterations = 2'000'000'000;
  std::vector<double> plain, sampled;
  uint64_t samples = 0;
  for (int r = 0; r < rounds; ++r) {
    uint64_t before = samples;
    plain.push_back(timed_run(iterations, 0, samples));
    sampled.push_back(timed_run(iterations, hz, samples));
    std::printf("round %d: plain %.3f s, sampled at %d Hz %.3f s (%llu samples)\n", r + 1, plain.back(), hz,
                sampled.back(), static_cast<unsigned long long>(samples - before));
  }
  double extra = median(sampled) - median(plain);
  double per_sample_us = extra / (static_cast<double>(samples) / rounds) * 1e6;
  std::printf("cost of one sample: %.1f us (median extra %.3f s over %.0f samples per run)\n", per_sample_us,
              extra, static_cast<double>(samples) / rounds);
  std::printf("at 500 Hz per CPU that is %.2f %% of each CPU\n", 500 * per_sample_us / 1e4);
  return 0;
}
