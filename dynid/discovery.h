// Discovery: which running processes are targets. A process is a target when
// its executable (/proc/PID/exe) is listed in [exeList]: by full path, by
// basename, or as the file a listed name links to in a binary directory
// (Debian's /usr/bin/redis-server -> redis-check-rdb: a running redis's exe
// is redis-check-rdb). /proc/PID/exe names the file even when it was deleted
// or replaced by a package upgrade, and for processes in other mount
// namespaces (containers).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "dynid/proc_reader.h"

namespace dyni {

// Which [exeList] entry a process's executable matched, and through what:
// "path" (the entry is its full path), "basename", or "LINK -> TARGET".
struct ExeMatch {
  std::string entry;
  std::string via;
};

// An entry whose file, found through symlinks, has another basename:
// {"redis-server", "/usr/bin/redis-server", "/usr/bin/redis-check-rdb"}.
struct ExeSymlink {
  std::string entry;
  std::string link;    // the path the entry names or was found at
  std::string target;  // canonical path of the file it leads to
};

// [exeList] as matched against processes. Invariant: `symlinks` were resolved
// from `entries` at config load or reload (resolve_exe_list), never later.
struct ExeMatcher {
  std::vector<std::string> entries;
  std::vector<ExeSymlink> symlinks;
};

// Resolves each bare name in each of `bin_dirs` (paths::bin_dirs()), and each
// path entry, through symlinks; keeps those that lead to a file of another
// basename (the basename itself matches anyway).
ExeMatcher resolve_exe_list(const std::vector<std::string>& exe_list,
                            const std::vector<std::string>& bin_dirs);

// How `exe_path` is listed, if it is: its full path, then its basename, then
// a symlink's target. Symlinks count only for a process in dynid's own mount
// namespace (`same_mount_ns`): inside a container the host's links mean
// nothing, and there a bare name matches by basename only.
std::optional<ExeMatch> match_exe(const ExeMatcher& matcher, const std::string& exe_path,
                                  bool same_mount_ns);

struct DiscoveredProcess {
  ProcStat stat;
  ExePath exe;
  std::string name;      // basename of the executable: what -status shows
  std::string mount_ns;  // "mnt:[...]"
  ExeMatch matched_by;
  // The executable file itself (stat of /proc/PID/exe: the file mapped, even
  // deleted); 0/0 when it could not be read. With mount_ns, it names the
  // process's group (process_group.h).
  uint64_t exe_dev = 0, exe_ino = 0;
};

std::string basename_of(const std::string& path);

// Scans `proc_root` (normally "/proc") once; skips `self` and kernel threads.
std::vector<DiscoveredProcess> discover(const ExeMatcher& matcher, const std::string& proc_root,
                                        pid_t self);

}  // namespace dyni
