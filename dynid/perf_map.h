// perf's map for JIT code (issue 23 item 1): /tmp/perf-PID.map, in the
// target's own mount namespace, naming every copy in dyni's caches as its
// original function with a " [dyni]" suffix, so that `perf report` on a
// dynimized target shows the functions and not [unknown].
//
// The file lies at a predictable name in a world-writable directory, and
// dynid is root; so it is opened relative to the target's /tmp, never
// through a symlink (O_NOFOLLOW), never a FIFO or device (a regular file,
// one link, checked on the open descriptor), and either created
// exclusively and given to the target's owner, as a JIT in the target would
// own it, or appended to when the target's owner already has one written
// since the target started (its own JIT's map, which is kept: perf reads
// both). A map older than the target is a dead process's with the same
// pid: it is removed first, so it never names this process's code. The map
// is left when the process exits (perf reads it at report time) and stays
// true after -undo: the caches stay mapped (I8).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/injector.h"

namespace dyni {

// Appends `copies` to the perf map of process (pid, start_time), creating
// it as above. Returns the path written, as the target sees it ("/tmp/perf-N.map").
Result<std::string> write_perf_map(pid_t pid, uint64_t start_time, const std::vector<CopyRange>& copies);

// One map line: "START SIZE NAME [dyni]" (hex, as perf reads it).
std::string perf_map_line(const CopyRange& copy);

}  // namespace dyni
