// For live scenario targets: a deterministic program that prints one line per
// round, every line the same. The target checks itself too: a round whose
// line differs from the first round's prints WRONG and exits 3, so a wrong
// result is seen even when the test reads no more output.
// usage of every scenario target: PROGRAM ROUNDS [ARGS...]   (ROUNDS 0: forever)
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace dyni::live {

template <class Round>
int print_rounds(int rounds, Round round) {
  std::string first;
  for (int r = 0; rounds == 0 || r < rounds; ++r) {
    std::string line = round();
    if (r == 0) first = line;
    if (line != first) {
      std::printf("WRONG round %d: %s, not %s\n", r, line.c_str(), first.c_str());
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  return 0;
}

inline int rounds_arg(int argc, char** argv) { return argc > 1 ? std::atoi(argv[1]) : 0; }

}  // namespace dyni::live
