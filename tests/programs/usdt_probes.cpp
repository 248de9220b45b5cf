// A busy target with a USDT probe (sys/sdt.h) in one of its two hot
// functions: dynid keeps that function in the original code, where a
// tracer's uprobe on the probe fires, and copies the other
// (tests/integration/daemon_test.cpp). Results are checked every round: a
// wrong one prints WRONG and exits 3.
// usage: dyni-test-usdt [SECONDS=30]
#include <sys/sdt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__attribute__((noinline)) unsigned long probed_work(unsigned long x) {
  for (int i = 0; i < 4000; ++i) x = x * 6364136223846793005UL + 1;
  DTRACE_PROBE1(dyni_test, round_done, x);
  return x;
}

__attribute__((noinline)) unsigned long plain_work(unsigned long x) {
  for (int i = 0; i < 4000; ++i) x = x * 2862933555777941757UL + 3;
  return x;
}

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const unsigned long expected = plain_work(probed_work(1));
  while (std::chrono::steady_clock::now() < until)
    for (int k = 0; k < 100; ++k)
      if (plain_work(probed_work(1)) != expected) {
        std::printf("WRONG\n");
        return 3;
      }
  std::printf("ok\n");
  return 0;
}
