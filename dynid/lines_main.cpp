// dyni-lines: dynid's helper that reads a module's source lines with LLVM's
// DWARF reader in a process of its own (line_reader.h). Not for people:
//   dyni-lines BUILD_ID|-   with the debug file open as fd 3, the addresses
//                           (8 bytes each) on stdin, the answer on stdout.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "dynid/line_reader.h"

int main(int argc, char** argv) {
  if (argc != 2 || ::isatty(0)) {
    std::fputs("dyni-lines is dynid's helper, run by it (see dynid/line_reader.h)\n", stderr);
    return 2;
  }
  return dyni::serve_source_lines(3, argv[1], 0, 1);
}
