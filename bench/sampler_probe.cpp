// dyni-bench-sampler PID SECONDS [HZ [per-cpu|per-thread [callchains|no-callchains]]]: samples PID exactly as dynid's profiler
// does (every thread, ring buffers drained every 100 ms, symbolized into a
// profile) and prints its own cost as JSON: samples, lost, CPU seconds, peak RSS.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "profiler/profile.h"
#include "profiler/recorder.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"

int main(int argc, char** argv) {
  using namespace dyni::profiler;
  if (argc < 3) {
    std::fprintf(stderr, "usage: dyni-bench-sampler PID SECONDS [HZ]\n");
    return 2;
  }
  pid_t pid = std::atoi(argv[1]);
  int seconds = std::atoi(argv[2]);
  SamplerOptions options;
  if (argc > 3) options.frequency_hz = std::atoi(argv[3]);
  if (argc > 4 && std::string(argv[4]) == "per-thread") options.scope = SamplerScope::PerThread;
  if (argc > 5 && std::string(argv[5]) == "no-callchains") options.callchains = false;
  auto symbolizer = Symbolizer::for_process(pid);
  auto sampler = symbolizer ? Sampler::attach(pid, options) : std::unexpected(symbolizer.error());
  if (!sampler) {
    std::fprintf(stderr, "dyni-bench-sampler: %s\n", sampler.error().message().c_str());
    return 1;
  }
  Profile profile(&*symbolizer);
  (void)sample_for(*sampler, profile, std::chrono::seconds(seconds));  // a target that exits ends it early
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  double cpu = self.ru_utime.tv_sec + self.ru_stime.tv_sec +
               (self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  std::printf("{\"samples\": %llu, \"lost\": %llu, \"threads\": %zu, \"cpu_seconds\": %.3f, "
              "\"cpu_percent_of_core\": %.2f, \"max_rss_mb\": %.1f, \"event\": \"%s\", \"scope\": \"%s\"}\n",
              static_cast<unsigned long long>(profile.total()),
              static_cast<unsigned long long>(sampler->stats().lost), sampler->stats().threads_seen,
              cpu, 100.0 * cpu / seconds, self.ru_maxrss / 1024.0, sampler->event_name().c_str(),
              sampler->scope() == SamplerScope::PerCpu ? "per-cpu" : "per-thread");
  return 0;
}
