// A target hot in two modules (issue 22, all_hot_modules): its own checksum
// loop, and libc's memset, memcpy and memcmp, which it calls through its PLT
// (the GOT slots dynid re-points at libc's copies). Every result is checked:
// it exits 3 on a wrong one. Usage: dyni-live-dynid_killed SECONDS THREADS
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kCopied = 64 * 1024, kMixed = 6 * 1024;

__attribute__((noinline)) uint64_t mix(const uint8_t* p, std::size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull + (h >> 29);
  return h;
}

void work(double seconds) {
  std::vector<uint8_t> a(kCopied), b(kCopied);
  for (std::size_t i = 0; i < kCopied; ++i) a[i] = static_cast<uint8_t>(i * 7 + i / 251);
  const uint64_t expected = mix(a.data(), kMixed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (std::size_t round = 0; std::chrono::steady_clock::now() < end; ++round) {
    const std::size_t n = kCopied - (round % 64) * 16;  // lengths vary, as a server's do
    std::memset(b.data(), static_cast<int>(round), n);
    std::memcpy(b.data(), a.data(), n);
    if (std::memcmp(a.data(), b.data(), n) != 0 || mix(b.data(), kMixed) != expected) {
      std::fprintf(stderr, "wrong result in round %zu\n", round);
      std::exit(3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 60;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work, seconds);
  work(seconds);
  for (std::thread& t : pool) t.join();
  return 0;
}
