// A thread in a counting copy's loop across the switch (issue 19 item 3).
// `long_run` loops calling the hot `mix`; the main thread's rounds call it
// with a short count (so it is hot and copied), and a second thread calls it
// with a long count when told to (SIGUSR1): from inside the counting copy
// the test tells it to enter, that call outlives the counting phase.
// usage: target ROUNDS rounds          one line a round, a short long_run
//        target ROUNDS long            one line a round, the long long_run
//        target ROUNDS serve SIDE_FILE rounds as above, and on each SIGUSR1
//                                      the long long_run on a thread of its
//                                      own; SIDE_FILE gets "progress ADDR",
//                                      "tid TID", then "started" and "done
//                                      RESULT" for each long call
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

namespace {

constexpr uint64_t kShort = 200'000;
constexpr uint64_t kLong = 1'800'000'000;  // about 12 s at full speed (AMD EPYC, KVM)

std::atomic<uint64_t> g_progress{0};  // the long run's iterations so far, read by the test
std::atomic<uint64_t> g_scratch{0};
volatile sig_atomic_t g_go = 0;

[[gnu::noinline]] uint64_t mix(uint64_t x, uint64_t i) {
  for (int k = 0; k < 2; ++k) x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ULL + i;
  return x;
}

[[gnu::noinline]] uint64_t long_run(uint64_t seed, uint64_t n, std::atomic<uint64_t>* progress) {
  uint64_t x = seed;
  for (uint64_t i = 0; i < n; ++i) {
    x = mix(x, i);
    x = (x ^ (x >> 31)) * 0x94D049BB133111EBULL;  // work of its own: the loop is hot too, and copied
    x = (x ^ (x >> 27)) * 0x9E3779B97F4A7C15ULL + i;
    if ((i & 4095) == 0) progress->store(i, std::memory_order_relaxed);
  }
  return x;
}

void side(const char* path, const std::string& line) {
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = dyni::live::rounds_arg(argc, argv);
  const std::string mode = argc > 2 ? argv[2] : "rounds";
  if (mode == "long")
    return dyni::live::print_rounds(rounds, [] { return std::to_string(long_run(7, kLong, &g_scratch)); });
  if (mode == "serve" && argc > 3) {
    const char* path = argv[3];
    side(path, "progress " + std::to_string(reinterpret_cast<uintptr_t>(&g_progress)));
    std::signal(SIGUSR1, [](int) { g_go = 1; });
    std::thread([path] {
      side(path, "tid " + std::to_string(syscall(SYS_gettid)));
      for (;;) {  // one long call for each SIGUSR1
        while (!g_go) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        g_go = 0;
        side(path, "started");
        side(path, "done " + std::to_string(long_run(7, kLong, &g_progress)));
      }
    }).detach();
  }
  return dyni::live::print_rounds(rounds, [] {
    uint64_t sum = 0;
    for (uint64_t r = 0; r < 200; ++r) sum += long_run(r, kShort, &g_scratch);
    return std::to_string(sum);
  });
}
