// libdyni-test-plugin.so: the hot code of dyni-test-plugin-host, which
// dlopens and dlcloses it in a loop (issue 22 item 4). A few functions that
// call each other, with loops and branches, so that dyni copies several and
// re-points calls between them.
#include <cstdint>

namespace {

__attribute__((noinline)) uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ULL;
  return x ^ (x >> 29);
}

__attribute__((noinline)) uint64_t fold(uint64_t x, int rounds) {
  uint64_t acc = 0;
  for (int i = 0; i < rounds; ++i) {
    x = mix(x + static_cast<uint64_t>(i));
    acc += (x & 1) ? x >> 7 : x << 3;
  }
  return acc;
}

}  // namespace

// A checksum of `items` items: the same for the same argument, in every load.
extern "C" __attribute__((visibility("default"))) uint64_t plugin_work(uint64_t items) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < items; ++i) sum += fold(i, 16 + static_cast<int>(i % 7));
  return sum;
}
