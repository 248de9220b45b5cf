// C++ exceptions through hot frames. exc_leaf throws (two types) or takes a
// backtrace(); exc_guarded catches one type in the middle and rethrows half
// of those; exc_top catches everything that gets that far. Every level holds
// a Guard whose destructor must run during unwinding. A round's line counts
// each of these and the backtrace's depth: a copy whose exception tables or
// frames were wrong would change a count, or end the process.
// usage: target ROUNDS
#include <execinfo.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

namespace {

struct Counts {
  uint64_t sum = 0, destructors = 0, caught_middle = 0, rethrown = 0, caught_top = 0, depth = 0;
  std::string line() const {
    return "sum " + std::to_string(sum) + " destructors " + std::to_string(destructors) + " middle " +
           std::to_string(caught_middle) + " rethrown " + std::to_string(rethrown) + " top " +
           std::to_string(caught_top) + " depth " + std::to_string(depth);
  }
};

struct Bad {
  uint64_t x;
};

struct Guard {
  uint64_t& n;
  ~Guard() { ++n; }
};

// Every level does work of its own, so that every level is hot and copied.
[[gnu::always_inline]] inline uint64_t mix(uint64_t x, int n) {
  for (int i = 0; i < n; ++i) x = (x ^ (x >> 31)) * 0x94D049BB133111EBULL + 1;
  return x;
}

[[gnu::noinline]] uint64_t exc_hash(uint64_t x) { return mix(x, 200); }

[[gnu::noinline]] uint64_t exc_leaf(uint64_t x, Counts& c) {
  Guard g{c.destructors};
  uint64_t h = exc_hash(mix(x, 100));
  if (x % 5 == 0) throw Bad{h};
  if (x % 7 == 3) throw std::runtime_error("seven");
  if (x % 97 == 1) {
    void* frames[64];
    c.depth = static_cast<uint64_t>(backtrace(frames, 64));
  }
  return h;
}

[[gnu::noinline]] uint64_t exc_mid(uint64_t x, Counts& c) {
  Guard g{c.destructors};
  return exc_leaf(x, c) + mix(x + 1, 100);
}

[[gnu::noinline]] uint64_t exc_guarded(uint64_t x, Counts& c) {
  Guard g{c.destructors};
  x = mix(x, 100) % 100003;
  try {
    return exc_mid(x, c);
  } catch (const Bad& b) {
    ++c.caught_middle;
    if (b.x % 2) {
      ++c.rethrown;
      throw;
    }
    return b.x;
  }
}

[[gnu::noinline]] uint64_t exc_top(uint64_t x, Counts& c) {
  x += mix(x, 100) % 3;
  try {
    return exc_guarded(x, c);
  } catch (const Bad& b) {
    ++c.caught_top;
    return b.x ^ 1;
  } catch (const std::exception&) {
    ++c.caught_top;
    return 7;
  }
}

[[gnu::noinline]] Counts exc_round() {
  Counts c;
  for (uint64_t x = 0; x < 30000; ++x) c.sum += exc_top(x, c);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  void* warm[4];
  backtrace(warm, 4);  // loads libgcc_s before anything else runs
  std::thread([] {
    const std::string first = exc_round().line();
    for (;;)
      if (exc_round().line() != first) {
        std::printf("WRONG in the worker\n");
        std::fflush(stdout);
        std::_Exit(3);
      }
  }).detach();
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [] { return exc_round().line(); });
}
