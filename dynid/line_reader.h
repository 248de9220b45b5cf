// The source lines of a module's instructions, read in a helper process
// (dyni-lines, dynid/lines_main.cpp) rather than in dynid: LLVM's DWARF
// reader crashes on malformed debug info (tests/fuzz/debug_line_fuzzer found
// a SEGV in DWARFUnit::getVariableForAddress within seconds), and a crash
// there must cost the copies their lines in gdb, never dynid its life (I9).
//
// dynid opens and checks the file (source_lines.h: root's alone, of the
// build-id), then hands the helper that descriptor, the addresses on its
// stdin, and reads the answers from its stdout. The helper drops root for
// nobody before it parses anything, and is killed after kLineReaderTimeout.
// What it answers is checked as untrusted too (parse_line_answers).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/source_lines.h"

namespace dyni {

inline constexpr std::chrono::seconds kLineReaderTimeout{30};

// The line of each of `addrs` (link-time addresses in the module at `path`,
// GNU build-id `build_id`), in order; fails, saying why, when none can be
// read (no trusted debug info, the helper died: "... killed by signal 11").
// `helper`: the dyni-lines executable (line_reader_path() by default).
Result<std::vector<std::optional<SourceLine>>> read_source_lines(const std::string& path, const std::string& build_id,
                                                                 const std::vector<uint64_t>& addrs,
                                                                 const std::string& helper = "");

// Where dyni-lines is: beside the running executable (the build tree), else
// ../libexec/dyni/ from it (an installed dynid in .../sbin).
std::string line_reader_path();

// The helper's side: reads the file at `file_fd`, every address on `in`
// (8 bytes each, to its end), answers on `out`. Returns its exit code.
int serve_source_lines(int file_fd, const std::string& build_id, int in, int out);

// The helper's answer for `count` addresses: 'k' then, for each address with
// a line, its index, line and file name (u32, u32, u32 length, bytes); or
// 'e' and a message. Anything else, or out of bounds, fails.
Result<std::vector<std::optional<SourceLine>>> parse_line_answers(std::span<const uint8_t> answer, std::size_t count);

}  // namespace dyni
