// dyni-bench-profile PID [HZ]: profiles PID exactly as dynid does (Recorder:
// per-CPU sampling, stability criterion) until it says the hot set is stable
// or gives up, and prints how long that took, as JSON. bench/time_to_stable.sh
// runs it against mariadbd under sysbench. Goal (issue 3): <= 10 s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "profiler/recorder.h"

int main(int argc, char** argv) {
  using namespace dyni::profiler;
  if (argc < 2) {
    std::fprintf(stderr, "usage: dyni-bench-profile PID [HZ]\n");
    return 2;
  }
  RecorderOptions options;
  options.sampler.frequency_hz = argc > 2 ? std::atoi(argv[2]) : 250;
  auto recorder = Recorder::start(std::atoi(argv[1]), options);
  if (!recorder) {
    std::fprintf(stderr, "dyni-bench-profile: %s\n", recorder.error().message().c_str());
    return 1;
  }
  while (!(*recorder)->done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!(*recorder)->step()) break;
  }
  (*recorder)->finish();
  auto j = (*recorder)->to_json(0);
  std::printf("{\"seconds\": %.1f, \"stable\": %s, \"samples\": %llu, \"hot_set_coverage\": %.3f, "
              "\"hot_set_99\": %llu, \"frequency_hz\": %d}\n",
              j["seconds"].get<double>(), j["stable"].get<bool>() ? "true" : "false",
              static_cast<unsigned long long>(j["samples"].get<uint64_t>()), j["hot_set_coverage"].get<double>(),
              static_cast<unsigned long long>(j["hot_set_99"].get<uint64_t>()), options.sampler.frequency_hz);
  return 0;
}
