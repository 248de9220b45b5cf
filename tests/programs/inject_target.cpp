// A target for live injection tests: C++ hot code with loops, a switch,
// recursion, calls through pointers and exceptions thrown and caught across
// several hot frames, all deterministic.
//  - a worker thread runs the work forever and checks every result against
//    the first one it computed: a changed result prints "WRONG" and exits 1;
//  - main answers "run N" with "sum S" (N rounds of the same work, computed
//    on request) and "ping" with "pong", and exits 0 at end of input.
// usage: dyni-test-inject (or dyni-test-inject-in-library: the same, the
// code in a shared library)
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

extern "C" {

std::atomic<uint64_t> inject_rounds{0};
// Rounds of the worker's one call (about 3 s): "pong" answers the rounds done.
constexpr int kSessionRounds = 300;

[[gnu::noinline]] uint64_t inject_mix(uint64_t x, int k) {
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

[[gnu::noinline]] uint64_t inject_loop(uint64_t x, int n) {
  for (int i = 0; i < n; ++i) x = inject_mix(x, i);
  return x;
}

[[gnu::noinline]] uint64_t inject_fib(int n) { return n < 2 ? static_cast<uint64_t>(n) : inject_fib(n - 1) + inject_fib(n - 2); }

[[gnu::noinline]] void inject_check(uint64_t x) {
  if (x % 7 == 3) throw std::runtime_error("seven");
  if (x % 11 == 5) throw static_cast<int>(x % 1000);
}

struct Counter {
  uint64_t& n;
  ~Counter() { ++n; }
};

// Throws through two hot frames, cleaned up in between, caught here.
[[gnu::noinline]] uint64_t inject_middle(uint64_t x, uint64_t& cleanups) {
  Counter c{cleanups};
  inject_check(x);
  return x + 1;
}

[[gnu::noinline]] uint64_t inject_guarded(uint64_t x, uint64_t& cleanups) {
  try {
    return inject_middle(x, cleanups);
  } catch (const std::runtime_error&) {
    return x * 2;
  } catch (int v) {
    return x + static_cast<uint64_t>(v);
  }
}

uint64_t inject_rseq_section(uint64_t x);

// dlsym(RTLD_NEXT, name), by a tail jump: dlsym sees its caller's return
// address (not a hot function: never copied itself).
[[gnu::noinline]] void* lookup_next(const char* name) { return dlsym(RTLD_NEXT, name); }

// Asks glibc for the next getpid and getppid after this module's, directly
// and through lookup_next: glibc finds the calling module by the return
// address, so this must run where it was loaded (a copy in anonymous memory
// would get NULL: the injector leaves it).
[[gnu::noinline]] uint64_t inject_lookup(uint64_t x) {
  return x + (dlsym(RTLD_NEXT, "getpid") != nullptr) + (lookup_next("getppid") != nullptr);
}

[[gnu::noinline]] uint64_t inject_round(uint64_t x) {
  uint64_t (*step)(uint64_t, int) = inject_loop;
  uint64_t cleanups = 0;
  for (int i = 0; i < 50; ++i) x = inject_guarded(step(x, 40 + i % 5), cleanups);
  return inject_rseq_section(inject_lookup(x + inject_fib(12) + cleanups));
}

// An rseq critical section (only its descriptor matters here: the process
// never arms it): the injector must leave this function in place.
[[gnu::noinline]] uint64_t inject_rseq_section(uint64_t x) {
  asm volatile(
      ".pushsection __rseq_cs, \"aw\"\n"
      ".balign 32\n"
      ".long 0, 0\n"
      ".quad 1f, 2f - 1f, 3f\n"
      ".popsection\n"
      "1: add $1, %0\n"
      "2:\n"
      ".pushsection .text.unlikely, \"ax\"\n"
      ".long 0x53053053\n"
      "3: ud2\n"
      ".popsection\n"
      : "+r"(x));
  return x;
}

}  // extern "C"

static uint64_t work(int rounds) {
  uint64_t x = 1;
  for (int r = 0; r < rounds; ++r) x = inject_round(x);
  return x;
}

extern "C" {
// A long call, like a server's session loop: once patched, the worker stays
// in its copy for many rounds, also after an undo (a redo must then prove a
// stack that passes through the cache).
[[gnu::noinline]] void inject_session(uint64_t expected, int repeats) {
  for (int i = 0; i < repeats; ++i, inject_rounds.fetch_add(1, std::memory_order_relaxed))
    if (work(200) != expected) {
      std::printf("WRONG sum\n");
      std::fflush(stdout);
      std::_Exit(1);
    }
}
}

// Built as libdyni-test-inject.so, the program is this function, which
// dyni-test-inject-in-library calls (inject_in_library.cpp).
#ifdef DYNI_TEST_INJECT_LIBRARY
extern "C" int dyni_test_inject_main() {
#else
int main() {
#endif
  const uint64_t expected = work(200);
  std::thread([expected] {
    for (;;) inject_session(expected, kSessionRounds);
  }).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line.rfind("run ", 0) == 0)
      std::printf("sum %llu\n", static_cast<unsigned long long>(work(std::stoi(line.substr(4)))));
    else
      std::printf("pong %llu\n", static_cast<unsigned long long>(inject_rounds.load()));
    std::fflush(stdout);
  }
  return 0;
}
