// Coverage for libFuzzer from code compiled by GCC.
//
// GCC cannot emit the coverage instrumentation libFuzzer consumes, and clang
// here cannot build this C++23 code base (libstdc++ 12's <expected> needs a
// newer clang). GCC's -fsanitize-coverage=trace-pc calls
// __sanitizer_cov_trace_pc() in every basic block; the link redirects those
// calls here (-Wl,--wrap), and each one bumps an 8-bit counter chosen by its
// call site, registered with libFuzzer as inline counters. libFuzzer then sees
// new edges as new counters, as with clang's own instrumentation.
#include <cstddef>
#include <cstdint>

extern "C" void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);
extern "C" void __sanitizer_cov_pcs_init(const uintptr_t* begin, const uintptr_t* end);

namespace {

constexpr std::size_t kCounters = 1 << 16;
uint8_t counters[kCounters];
uintptr_t pc_table[2 * kCounters];  // (pseudo-pc, flags) pairs, as libFuzzer expects

__attribute__((constructor)) void register_counters() {
  for (std::size_t i = 0; i < kCounters; ++i) pc_table[2 * i] = i + 1;
  __sanitizer_cov_8bit_counters_init(counters, counters + kCounters);
  __sanitizer_cov_pcs_init(pc_table, pc_table + 2 * kCounters);
}

}  // namespace

extern "C" void __wrap___sanitizer_cov_trace_pc() {
  uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  ++counters[(pc ^ (pc >> 16)) & (kCounters - 1)];
}
