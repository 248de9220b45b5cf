// Discovery: which running processes are targets. A process is a target when
// the basename or full path of its executable (/proc/PID/exe) is in [exeList].
// /proc/PID/exe names the file even when it was deleted or replaced by a
// package upgrade, and for processes in other mount namespaces (containers).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "dynid/proc_reader.h"

namespace dyni {

struct DiscoveredProcess {
  ProcStat stat;
  ExePath exe;
  std::string name;      // basename of the executable: what -status shows
  std::string mount_ns;  // "mnt:[...]"
};

// True when `exe_path` is listed: entries with a '/' match the full path,
// other entries match the basename.
bool exe_listed(const std::vector<std::string>& exe_list, const std::string& exe_path);

std::string basename_of(const std::string& path);

// Scans `proc_root` (normally "/proc") once; skips `self` and kernel threads.
std::vector<DiscoveredProcess> discover(const std::vector<std::string>& exe_list,
                                        const std::string& proc_root, pid_t self);

}  // namespace dyni
