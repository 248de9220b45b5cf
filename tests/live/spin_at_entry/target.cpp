// Threads spinning at a patched entry: spin_wait's first instruction is a
// two-byte `pause`, and the loop that waits for spin_go jumps back to the
// entry, so a waiting thread's PC is at entry+2 (inside the five bytes a patch
// overwrites) most of the time. A toggler thread opens and closes the gate;
// the workers' results do not depend on when it does. One more thread is
// parked for good in spin_park, whose wait loop jumps back to entry+2: a
// patch there would send it into the middle of the jump.
// usage: target ROUNDS
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

extern "C" {
std::atomic<int> spin_go{0};
std::atomic<int> spin_park_go{0};
uint64_t spin_wait(uint64_t x);
void spin_park();
}

asm(R"(
  .text
  .globl spin_wait
  .type spin_wait, @function
spin_wait:
  .cfi_startproc
1:
  pause
  cmpl $0, spin_go(%rip)
  je 1b
  imul $0x2545F491, %rdi, %rax
  add $1, %rax
  ret
  .cfi_endproc
  .size spin_wait, .-spin_wait

  .globl spin_park
  .type spin_park, @function
spin_park:
  .cfi_startproc
  pause
1:
  cmpl $0, spin_park_go(%rip)
  jne 2f
  pause
  jmp 1b
2:
  ret
  .cfi_endproc
  .size spin_park, .-spin_park
)");

[[gnu::noinline]] static uint64_t spin_mix(uint64_t x, int i) {
  for (int k = 0; k < 40; ++k) x = (x ^ (x >> 13)) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(i);
  return x;
}

[[gnu::noinline]] static uint64_t spin_work(uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 20000; ++i) x = spin_mix(spin_wait(x), i);
  return x;
}

int main(int argc, char** argv) {
  std::thread(spin_park).detach();
  std::thread([] {
    for (;;) {
      spin_go.store(1);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      spin_go.store(0);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }).detach();
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [] {
    uint64_t a = 0, b = 0;
    std::thread other([&] { a = spin_work(1); });
    b = spin_work(2);
    other.join();
    return std::to_string(a) + " " + std::to_string(b);
  });
}
