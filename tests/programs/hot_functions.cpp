// A target with a known profile: 24 functions, function k doing (24 - k) units
// of work per round, so function k gets (24-k)/300 of the CPU (8 % down to 0.3 %).
// usage: dyni-test-hot [SECONDS=30] [THREADS=2]
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

static std::atomic<unsigned long> sink;

template <int K>
__attribute__((noinline)) unsigned long hot_work(unsigned long x) {
  for (int unit = 0; unit < 24 - K; ++unit)
    for (int i = 0; i < 2000; ++i) x = x * 6364136223846793005UL + K + 1;
  return x;
}

template <int... K>
unsigned long one_round(unsigned long x, std::integer_sequence<int, K...>) {
  ((x = hot_work<K>(x)), ...);
  return x;
}

static void run(std::chrono::steady_clock::time_point until) {
  unsigned long x = 1;
  while (std::chrono::steady_clock::now() < until)
    x = one_round(x, std::make_integer_sequence<int, 24>{});
  sink += x;
}

int main(int argc, char** argv) {
  int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(run, until);
  run(until);
  for (auto& t : pool) t.join();
  return 0;
}
