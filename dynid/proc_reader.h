// Reads what discovery needs about a process from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace dyni {

// The rest of the line that starts with `name` (say "TracerPid:") in the
// text of a /proc/.../status file, or "" when there is none. Only at a
// line's start: a thread's Name: line may hold any text.
std::string status_field(const std::string& status, std::string_view name);

// Fields of /proc/PID/stat that dynid uses.
struct ProcStat {
  pid_t pid = 0;
  std::string comm;          // may contain spaces and ')' (set by the process)
  char state = '?';
  pid_t ppid = 0;
  uint64_t threads = 0;      // num_threads
  uint64_t cpu_ticks = 0;    // utime + stime of all threads, in clock ticks
  uint64_t children_ticks = 0;  // cutime + cstime: its children's, once it reaped them (group_cpu.h)
  uint64_t start_time = 0;   // since boot, in clock ticks: (pid, start_time) names a process
  // Where exec put the code and the stack (startcode, startstack), mixed; 0
  // when hidden. An exec keeps pid and start time, and with ASLR changes this.
  uint64_t image = 0;
  // Not read now: an idle process's reading kept from an earlier scan
  // (discovery.h ProcessIdentities::stat_of). Its CPU ticks are not a
  // reading of this moment.
  bool reused = false;
};

// Parses the text of /proc/PID/stat.
Result<ProcStat> parse_proc_stat(const std::string& text);
Result<ProcStat> read_proc_stat(const std::string& proc_root, pid_t pid);

// The executable as the kernel names it: /proc/PID/exe with a " (deleted)"
// suffix removed. Fails for kernel threads and vanished processes.
struct ExePath {
  std::string path;
  bool deleted = false;  // the file was unlinked or replaced (package upgrade)
};
Result<ExePath> read_exe(const std::string& proc_root, pid_t pid);

// "mnt:[4026531841]": tells processes in other mount namespaces (containers).
std::string read_mount_namespace(const std::string& proc_root, pid_t pid);

// Numeric entries of /proc.
std::vector<pid_t> list_pids(const std::string& proc_root);

}  // namespace dyni
