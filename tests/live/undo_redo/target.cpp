// A busy target for undo/redo loops: two workers run a switch, a loop and a
// recursion over and over (long calls: threads stay in copies across undo
// and redo), and main prints each round's checksum.
// usage: target ROUNDS
#include <cstdint>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

namespace {

[[gnu::noinline]] uint64_t ur_mix(uint64_t x, int k) {
  switch (k & 7) {
    case 0: return x * 6364136223846793005ULL + 1;
    case 1: return x ^ (x >> 17);
    case 2: return x + 0x9e3779b97f4a7c15ULL;
    case 3: return (x << 7) | (x >> 57);
    case 4: return x * 3 + static_cast<uint64_t>(k);
    case 5: return ~x;
    case 6: return x - (x >> 3);
    default: return x ^ 0xdeadbeefULL;
  }
}

[[gnu::noinline]] uint64_t ur_fib(int n) { return n < 2 ? static_cast<uint64_t>(n) : ur_fib(n - 1) + ur_fib(n - 2); }

[[gnu::noinline]] uint64_t ur_work(uint64_t x) {
  for (int i = 0; i < 4000000; ++i) x = ur_mix(x, i);
  return x + ur_fib(22);
}

}  // namespace

int main(int argc, char** argv) {
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [] {
    uint64_t a = 0;
    std::thread other([&] { a = ur_work(1); });
    uint64_t b = ur_work(2);
    other.join();
    return std::to_string(a) + " " + std::to_string(b);
  });
}
