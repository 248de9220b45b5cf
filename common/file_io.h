// Small file helpers with Result errors: whole-file read, atomic replace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

Result<std::string> read_file(const std::string& path, std::size_t max_bytes = 1 << 20);
// Up to `length` bytes of `path` from `offset` (fewer where the file ends).
Result<std::string> read_file_range(const std::string& path, uint64_t offset, std::size_t length);
// Like read_file, for a file that must be a regular one (a config): refuses
// devices, FIFOs, sockets and directories without blocking on them
// (/dev/zero never ends; opening a FIFO waits for a writer). Errors say
// "cannot read <label> <path>: <reason>".
Result<std::string> read_regular_file(const std::string& path, std::size_t max_bytes,
                                      const std::string& label = "");
// Writes to a temporary file beside `path`, fsyncs, renames over `path`:
// a crash leaves either the old or the new content, never a mix.
Status write_file_atomic(const std::string& path, const std::string& content, mode_t mode);
// Writes all of `text` to `fd`, again after a short write or EINTR.
Status write_all(int fd, const std::string& text);
// mkdir for one level below an existing parent, then enforces `mode`.
Status ensure_dir(const std::string& path, mode_t mode);
// mkdir -p: creates missing parents (0755) and `path` with `mode`; an existing
// `path` is left as it is.
Status ensure_dir_p(const std::string& path, mode_t mode);
// The positive numeric entries of a directory: the pids of /proc, the thread
// ids of /proc/PID/task. Empty when the directory cannot be read.
std::vector<pid_t> list_numeric_entries(const std::string& dir);

}  // namespace dyni
