// A target: one live process whose executable is listed in [exeList], and
// where it stands in dyni's pipeline (DESIGN.md §1, §3).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>


namespace dyni {

// In pipeline order, then the end states. `-status` prints state_text().
enum class TargetState {
  Waiting,      // listed and found, not CPU-busy yet
  Profiling,    // busy: being sampled
  Dynimizing,   // hot code being built and injected
  Dynimized,    // running from the code cache
  Undone,       // returned to its original code by -undo
  Unsupported,  // dyni cannot handle it (reason says why)
  Failed,       // dyni tried and gave up (reason says why); the target is unharmed
  Unlicensed,   // no active license: dyni optimizes nothing
};

const char* state_name(TargetState state);

struct Target {
  // Identity: a pid is reused, (pid, start_time) is not.
  pid_t pid = 0;
  pid_t ppid = 0;  // its parent (a forking server's members are its children)
  uint64_t threads = 0;  // at the last scan
  uint64_t start_time = 0;
  uint64_t image = 0;  // ProcStat::image: changes when the process execs

  std::string name;  // executable basename
  std::string exe;   // executable path as /proc/PID/exe names it
  bool exe_deleted = false;
  std::string mount_ns;
  std::string matched_entry;  // the [exeList] entry it matched
  std::string matched_via;    // "basename", "path" or "LINK -> TARGET"
  std::string group;          // its process group's key (process_group.h)
  bool group_leader = false;  // made busy by its group's CPU, not its own
  bool with_descendants = false;  // a leading parent: profiled and counted with what it forks (process_group.h)
  bool as_parent = false;         // chosen as its group's parent, to lead or follow (process_group.h)
  pid_t follows = 0;          // dynimized by its group's plan, counted in this member (process_group.h)

  TargetState state = TargetState::Waiting;
  std::string reason;    // for Unsupported/Failed
  int64_t since_ms = 0;  // wall clock (unix ms) of the last state change

  double cpu_percent = -1;  // over the busy window; -1 until measured
  int64_t observed_ms = 0;  // how long its CPU readings span: 0 when found at the last scan
};

// "waiting", "failed: <reason>", ...
std::string state_text(const Target& target);

}  // namespace dyni
