// dyni-bench-throw [THREADS=1]: throws C++ exceptions through three frames
// and catches them, forever, in THREADS threads; every 500 ms prints
// "rate N": exceptions thrown and caught per second across the threads.
// bench/throw_cost.sh runs two copies side by side and dynimizes one.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

std::atomic<unsigned long> caught{0};

[[gnu::noinline]] int throw_leaf(int x) {
  if (x >= 0) throw std::runtime_error("bench");
  return x;
}

[[gnu::noinline]] int throw_mid(int x) {
  std::vector<int> held(1, x);  // a destructor to run on the way out
  return throw_leaf(held[0]) + 1;
}

[[gnu::noinline]] int throw_top(int x) {
  try {
    return throw_mid(x);
  } catch (const std::exception&) {
    return -1;
  }
}

void thrower() {
  for (int i = 0;; ++i)
    if (throw_top(i & 0xffff) == -1) caught.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  for (int i = 0; i < threads; ++i) std::thread(thrower).detach();
  // main waits in read(), not nanosleep: a thread in nanosleep restarts
  // through restart_block and cannot take dyni's call to __register_frame,
  // and the throwers are nearly always inside libgcc.
  int tick[2];
  if (pipe(tick) != 0) return 1;
  std::thread([&] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (write(tick[1], "t", 1) != 1) std::abort();
    }
  }).detach();
  unsigned long last = 0;
  for (char c;;) {
    if (read(tick[0], &c, 1) != 1) return 1;
    unsigned long now = caught.load();
    std::printf("rate %lu\n", (now - last) * 2);
    std::fflush(stdout);
    last = now;
  }
}
