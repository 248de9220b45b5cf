// A thread storm. Each round starts 64 threads, three at a time, each of
// which runs hot code for about a millisecond and dies; a long-lived thread
// runs the same code all along. Threads are born and die hundreds of times a
// second, also while dynid stops the world, unwinds and patches.
// usage: target ROUNDS
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/live/rounds.h"

namespace {

[[gnu::noinline]] uint64_t storm_step(uint64_t x, int i) {
  return (x ^ (x >> 27)) * 0x3C79AC492BA7B653ULL + static_cast<uint64_t>(i);
}

[[gnu::noinline]] uint64_t storm_work(uint64_t x) {
  for (int i = 0; i < 100000; ++i) x = storm_step(x, i);
  return x;
}

[[gnu::noinline]] uint64_t storm_round() {
  uint64_t results[64] = {};
  for (int first = 0; first < 64; first += 3) {
    std::vector<std::thread> born;
    for (int t = first; t < first + 3 && t < 64; ++t)
      born.emplace_back([&results, t] { results[t] = storm_work(static_cast<uint64_t>(t)); });
    for (auto& t : born) t.join();
  }
  uint64_t sum = 0;
  for (uint64_t r : results) sum = sum * 31 + r;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::thread([] {
    const uint64_t expected = storm_work(99);
    for (;;)
      if (storm_work(99) != expected) {
        std::printf("WRONG in the long-lived thread\n");
        std::fflush(stdout);
        std::_Exit(3);
      }
  }).detach();
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [] { return std::to_string(storm_round()); });
}
