// Fuzz target: what dynid itself parses of debug info and of its line
// reader (I9): the section-header check that picks a module's debug file
// (dynid/source_lines.h, has_line_section) and the answer of the dyni-lines
// helper (dynid/line_reader.h, parse_line_answers), whose process may have
// been taken over by a hostile file. LLVM's DWARF reader itself runs in that
// helper, not here: this fuzzer's first run found it crashing on a mutated
// executable within seconds (tests/fuzz/regressions/debug_line-*; the unit
// test DebugLines.AFileThatCrashesLlvmsReaderCostsTheLinesNotTheCaller).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "dynid/line_reader.h"
#include "dynid/source_lines.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  // The check reads a file: the input as one, in memory.
  static const int fd = ::memfd_create("dyni-debug-line-fuzz", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    __builtin_trap();
  (void)dyni::has_line_section(fd, static_cast<off_t>(size));
  // The same bytes as the helper's answer, for a few address counts.
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{64}, size}) {
    auto lines = dyni::parse_line_answers({data, size}, count);
    if (lines && lines->size() != count) __builtin_trap();
    if (lines)
      for (const auto& at : *lines)
        if (at && at->line == 0) __builtin_trap();  // a line is a line
  }
  return 0;
}
