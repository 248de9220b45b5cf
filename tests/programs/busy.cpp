// A CPU-busy target: spins THREADS threads for at most SECONDS seconds.
// usage: dyni-test-busy [SECONDS=30] [THREADS=1] [COMM]
// COMM renames the process (prctl), which must not change how dynid finds it.
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

static std::atomic<unsigned long> sink;

static void spin(std::chrono::steady_clock::time_point until) {
  unsigned long x = 1;
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005UL + 1;
  sink += x;
}

int main(int argc, char** argv) {
  int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  if (argc > 3) prctl(PR_SET_NAME, argv[3]);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(spin, until);
  spin(until);
  for (auto& t : pool) t.join();
  return 0;
}
