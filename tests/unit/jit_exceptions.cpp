// C++ functions that throw, catch, clean up and rethrow through each other:
// their copies run under exceptions in jit_unwind_exec_test.cpp. Compiled at
// -O2; noinline keeps each a real frame.
#include <execinfo.h>

#include <stdexcept>

namespace {
struct Guard {
  ~Guard() { ++destroyed; }
  static inline long destroyed = 0;
};
}  // namespace

extern "C" {

long jit_guards_destroyed() { return Guard::destroyed; }

[[gnu::noinline]] void jit_thrower(int x) {
  if (x % 3 == 0) throw std::runtime_error("three");
  if (x % 5 == 0) throw x;
  if (x % 7 == 0) throw 2.5;
}

// Catches by type, in the middle of the stack.
[[gnu::noinline]] long jit_catcher(int x) {
  Guard g;
  try {
    jit_thrower(x);
    return x;
  } catch (const std::runtime_error&) {
    return -1;
  } catch (int v) {
    return -v;
  }
}

// No handler: its destructor runs as the exception passes (a cleanup pad).
[[gnu::noinline]] long jit_passer(int x) {
  Guard g;
  long r = jit_catcher(x);
  jit_thrower(x + 1);
  return r * 2;
}

// Catches what gets past, rethrows some, catches all at the top.
[[gnu::noinline]] long jit_rethrower(int x) {
  try {
    return jit_passer(x);
  } catch (double) {
    if (x % 2) throw;
    return -1000;
  }
}

[[gnu::noinline]] long jit_top(int x) {
  try {
    return jit_rethrower(x);
  } catch (...) {
    return -2000;
  }
}

// backtrace() from inside a chain of frames: how many frames it sees.
[[gnu::noinline]] int jit_backtrace_depth(int x) {
  void* frames[64];
  return x <= 0 ? backtrace(frames, 64) : jit_backtrace_depth(x - 1) + (x == 1000 ? 1 : 0);
}

}  // extern "C"
