// The source lines of a module's instructions, from its DWARF line tables
// (issue 23 item 2: gdb shows file:line in dyni's copies). Read with LLVM's
// DWARF reader (DebugInfo/DWARF), never a reader of dyni's own.
//
// Where: the module's separate debug file by build-id
// (/usr/lib/debug/.build-id/xx/yyyy.debug, as -dbgsym packages and
// libc6-dbg install them), else the module's file itself, if it has a
// .debug_line. A target's files are its own input to a root daemon (I9):
// only a file root alone may write (owner root, not group- or
// world-writable), reached through directories root alone may change (or
// sticky), not on FUSE, under 512 MiB, opened once and checked as opened,
// of the module's build-id, is read; any other is passed over, and the
// copies then have no lines. The file is read into memory, never mapped.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <sys/types.h>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

struct SourceLine {
  std::string file;  // as the compiler recorded it, with its directory
  uint32_t line = 0;
};

class SourceLines {
 public:
  // The lines of the module at `path` with GNU build-id `build_id` (hex):
  // fails, saying why, when there are none to read.
  static Result<SourceLines> open(const std::string& path, const std::string& build_id);
  // The part of open() after the file's checks: the lines of an ELF file
  // read into `bytes` (`name` for messages), of build-id `build_id` unless
  // empty. The bytes are untrusted (I9): tests/fuzz/debug_line_fuzzer.cpp.
  static Result<SourceLines> from_bytes(std::string bytes, const std::string& name, const std::string& build_id);
  SourceLines(SourceLines&&) noexcept;
  SourceLines& operator=(SourceLines&&) noexcept;
  ~SourceLines();

  // The line of the instruction at link-time address `addr`, if known.
  std::optional<SourceLine> at(uint64_t addr) const;
  const std::string& path() const { return path_; }  // the file read

 private:
  struct Reader;
  explicit SourceLines(std::unique_ptr<Reader> reader, std::string path);
  std::unique_ptr<Reader> reader_;
  std::string path_;
};

// Whether dynid may parse the file at `path` for debug info (above); or why not.
Status trusted_debug_file(const std::string& path);

// The files that may hold the debug info of the module at `path`: its
// separate debug file by build-id, then the module itself.
std::vector<std::string> debug_info_candidates(const std::string& path, const std::string& build_id);

// `path` opened for reading when dynid may parse it (trusted_debug_file)
// and it has a .debug_line section; or why not. The caller closes it.
Result<int> open_debug_info(const std::string& path);

// The whole of the open file `fd` (at most 512 MiB), read, never mapped.
Result<std::string> read_debug_info(int fd);

// Whether the ELF file open at `fd`, of `size` bytes, has a .debug_line
// section, from its section headers alone (a stripped binary is then not
// read whole for nothing). Untrusted: every read is bounded (fuzzed too).
bool has_line_section(int fd, off_t size);

}  // namespace dyni
