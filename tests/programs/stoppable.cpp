// A target for stop-the-world tests: it notices if a stop changed anything.
// usage: dyni-test-stoppable [spawner]
//  - three workers recompute a known checksum forever; a wrong result prints
//    "WRONG checksum" and exits 1 (a register or flag clobbered by a stop would show);
//  - a sleeper loops in nanosleep (a blocking call that must restart);
//  - a vector thread keeps known values in ymm8-ymm15 and checks them in a
//    tight loop (xstate lost or clobbered by a stop or a remote call shows);
//  - a masked thread keeps SIGUSR2 blocked and checks its mask stays so;
//  - with "spawner", a thread creates and joins short-lived threads forever
//    (threads appear while the world is being stopped);
//  - SIGUSR1 and SIGRTMIN (which queues: each one sent arrives once) are counted;
//  - main prints "ready", then answers each line read from stdin (a blocking
//    read across stops) with "got LINE usr1=N rt=M", and exits 0 at end of input.
#include <pthread.h>
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

[[noreturn]] void wrong(const char* what) {
  std::printf("WRONG %s\n", what);
  std::fflush(stdout);
  _exit(1);
}

uint64_t checksum() {
  uint64_t x = seed;
  for (int i = 0; i < 200000; ++i) x = x * 6364136223846793005ULL + static_cast<uint64_t>(i);
  return x;
}

[[noreturn]] void work(uint64_t expected) {
  for (;; rounds.fetch_add(1, std::memory_order_relaxed))
    if (checksum() != expected) wrong("checksum");
}

[[noreturn]] void sleep_forever() {
  for (;;) {
    timespec ts{0, 20'000'000};
    nanosleep(&ts, nullptr);
  }
}

__attribute__((target("avx2"))) [[noreturn]] void vectors() {
  alignas(32) static uint64_t pattern[8][4];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) pattern[i][j] = 0x0101010101010101ULL * static_cast<uint64_t>(i * 4 + j + 1);
#define DYNI_CHECK(n, reg) \
  "vpcmpeqq " #n "(%0), %%" reg ", %%ymm0\n vpmovmskb %%ymm0, %%eax\n cmp $-1, %%eax\n jne 2f\n"
  asm volatile(
      "vmovdqa 0(%0), %%ymm8\n vmovdqa 32(%0), %%ymm9\n vmovdqa 64(%0), %%ymm10\n vmovdqa 96(%0), %%ymm11\n"
      "vmovdqa 128(%0), %%ymm12\n vmovdqa 160(%0), %%ymm13\n vmovdqa 192(%0), %%ymm14\n vmovdqa 224(%0), %%ymm15\n"
      "1:\n" DYNI_CHECK(0, "ymm8") DYNI_CHECK(32, "ymm9") DYNI_CHECK(64, "ymm10") DYNI_CHECK(96, "ymm11")
      DYNI_CHECK(128, "ymm12") DYNI_CHECK(160, "ymm13") DYNI_CHECK(192, "ymm14") DYNI_CHECK(224, "ymm15")
      "lock incq %1\n jmp 1b\n"
      "2:\n"
      :
      : "r"(pattern), "m"(rounds)
      : "rax", "xmm0", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
#undef DYNI_CHECK
  wrong("vectors");
}

[[noreturn]] void masked() {
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, nullptr);
  for (;;) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (!sigismember(&now, SIGUSR2) || sigismember(&now, SIGUSR1)) wrong("mask");
    rounds.fetch_add(1, std::memory_order_relaxed);
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
  if (__builtin_cpu_supports("avx2")) std::thread(vectors).detach();
  std::thread(masked).detach();
  if (argc > 1 && std::strcmp(argv[1], "spawner") == 0) std::thread(spawn_forever).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    std::printf("got %s usr1=%d rt=%d\n", line.c_str(), usr1.load(), rt.load());
    std::fflush(stdout);
  }
  return 0;
}
