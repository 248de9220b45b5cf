// A target for stop-the-world tests: it notices if a stop changed anything.
// usage: dyni-test-stoppable [spawner]
//  - three workers recompute a known checksum forever; a wrong result prints
//    "WRONG" and exits 1 (a register or flag clobbered by a stop would show);
//  - a sleeper loops in nanosleep (a blocking call that must restart);
//  - with "spawner", a thread creates and joins short-lived threads forever
//    (threads appear while the world is being stopped);
//  - SIGUSR1 and SIGRTMIN (which queues: each one sent arrives once) are counted;
//  - main prints "ready", then answers each line read from stdin (a blocking
//    read across stops) with "got LINE usr1=N rt=M", and exits 0 at end of input.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

namespace {

std::atomic<int> usr1{0}, rt{0};
std::atomic<uint64_t> rounds{0};  // a side effect per round: the loop must really run
volatile uint64_t seed = 1;       // read each round: the checksum must really be recomputed

uint64_t checksum() {
  uint64_t x = seed;
  for (int i = 0; i < 200000; ++i) x = x * 6364136223846793005ULL + static_cast<uint64_t>(i);
  return x;
}

[[noreturn]] void work(uint64_t expected) {
  for (;; rounds.fetch_add(1, std::memory_order_relaxed))
    if (checksum() != expected) {
      std::fputs("WRONG\n", stdout);
      std::fflush(stdout);
      _exit(1);
    }
}

[[noreturn]] void sleep_forever() {
  for (;;) {
    timespec ts{0, 20'000'000};
    nanosleep(&ts, nullptr);
  }
}

[[noreturn]] void spawn_forever() {
  for (;;) std::thread([] { volatile int x = 0; for (int i = 0; i < 1000; ++i) x = x + i; }).join();
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = [](int) { usr1.fetch_add(1); };
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = [](int) { rt.fetch_add(1); };
  sigaction(SIGRTMIN, &sa, nullptr);
  uint64_t expected = checksum();
  for (int i = 0; i < 3; ++i) std::thread(work, expected).detach();
  std::thread(sleep_forever).detach();
  if (argc > 1 && std::strcmp(argv[1], "spawner") == 0) std::thread(spawn_forever).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    std::printf("got %s usr1=%d rt=%d\n", line.c_str(), usr1.load(), rt.load());
    std::fflush(stdout);
  }
  return 0;
}
