// perf's map for JIT code (issue 23 item 1): /tmp/perf-PID.map, in the
// target's own mount namespace, naming every copy in dyni's caches as its
// original function with a " [dyni]" suffix, so that `perf report` on a
// dynimized target shows the functions and not [unknown].
//
// The file lies at a predictable name in a world-writable directory, and
// dynid is root. So:
// - the target's root is opened through /proc/PID/root, and tmp/perf-N.map
//   resolved inside it (openat2 RESOLVE_IN_ROOT, no symlink at any step, no
//   magic link), with the thread's filesystem uid and gid the target's: the
//   kernel checks each step as for a JIT in the target, and a file created
//   is the target's. The process is checked to be the same (pid and start
//   time) around the open of its root.
// - a map is created exclusively (O_EXCL, O_NOCTTY, O_NONBLOCK). One that
//   exists is looked at through an O_PATH descriptor first (no device or
//   FIFO is ever opened): it is appended to only when it is a regular file
//   with one link, of the target's owner, not held open by the target (dyni
//   appends to its own map of this process). A map the target holds open is
//   its own JIT's, which writes at its own offset: it is left alone, and
//   -status says so. A map older than the target is a dead process's with
//   the same pid, whoever owned it: it is removed (as the target's owner;
//   the sticky /tmp may refuse, and -status then says so) and made anew.
// - function names lose their control bytes: one line a copy.
// The map is left when the process exits (perf reads it at report time) and
// stays true after -undo: the caches stay mapped (I8).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "dynid/injector.h"

namespace dyni {

// Appends `copies` to the perf map of process (pid, start_time), creating
// it as above. Returns the path written, as the target sees it ("/tmp/perf-N.map").
Result<std::string> write_perf_map(pid_t pid, uint64_t start_time, const std::vector<CopyRange>& copies);

// One map line: "START SIZE NAME [dyni]" (hex, as perf reads it).
std::string perf_map_line(const CopyRange& copy);

// The maps dynid wrote for processes that have exited. Each stays for perf
// report until a new process takes its pid; then it is removed, as that
// process sees /tmp, if it is still dyni's alone (a plain file older than
// the new process, every line a " [dyni]" one), so that it never names the
// new process's code. Best effort: a process that takes the pid is seen at
// the next scan (one interval); a restarted dynid knows only those in its
// own /tmp, by their pids being free (take_over_leftovers).
// Maps in dynid's own /tmp (targets in its mount and pid namespaces) are
// also bounded in number: past `kept_here` dead processes' maps, the oldest
// goes, while its pid is free and it is dyni's alone, unchanged for a
// minute (so that servers forking a dynimized worker per connection do not
// fill /tmp). A unit's PrivateTmp goes with the unit.
// A process's perf map as dynid itself sees it: the same file (device and
// inode) at `path` in dynid's own view. Empty path: none (another mount
// namespace, a chroot, a /tmp of its own).
struct PerfMapHere {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
};

class StalePerfMaps {
 public:
  static constexpr std::size_t kKeptHere = 256;
  explicit StalePerfMaps(std::size_t kept_here = kKeptHere) : kept_here_(kept_here) {}
  // dynid wrote the map of process (pid, start_time, image), which has
  // exited; `here`: that map in dynid's own view, if it has one
  // (perf_map_seen_here). Returns how many older maps went for it.
  std::size_t exited(pid_t pid, uint64_t start_time, uint64_t image, const PerfMapHere& here = {});
  // Each scan: the maps of pids that another process has taken are removed,
  // and those past the last `kept_here` that had to wait. Returns how many
  // were removed.
  // `listed`: the pids of this scan's /proc listing, when it is at hand
  // (a pid not in it is free: no kill(2) for each of thousands).
  std::size_t sweep(const std::unordered_set<pid_t>& listed = {});
  // At start: the maps in `dir` (dynid's own /tmp) of pids that are free
  // now, left by targets of an earlier dynid (which alone knew them), join
  // the bound, oldest first. Returns how many past it were removed.
  std::size_t take_over_leftovers(const std::string& dir = "/tmp");
  std::size_t size() const { return exited_.size(); }

 private:
  std::size_t trim_here();

  struct Dead {
    uint64_t start_time = 0, image = 0;
  };
  std::map<pid_t, Dead> exited_;
  std::size_t kept_here_;
  std::deque<std::pair<pid_t, PerfMapHere>> here_;  // exit order
};

// Process `pid`'s perf map in dynid's own view, if it is there: the file the
// process sees as /tmp/perf-N.map is the very file at dynid's /tmp/perf-N.map.
PerfMapHere perf_map_seen_here(pid_t pid);

// Removes `map` (dynid's view) of a dead process `pid` while the pid is free,
// if it is still that file, a plain one, unchanged for a minute, every line
// dyni's. true: removed, or none there; false: written less than a minute
// ago (try again later); an error: left alone for good.
Result<bool> remove_dead_perf_map(pid_t pid, const PerfMapHere& map);

// Removes /tmp/perf-N.map of process (pid, start_time), as it sees it, if
// the map is older than the process and every line is dyni's.
Status remove_stale_perf_map(pid_t pid, uint64_t start_time);

}  // namespace dyni
