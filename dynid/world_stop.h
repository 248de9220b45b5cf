// Stops every thread of a target for a short window with ptrace (DESIGN.md §3
// step 7, invariants I2 and I3): the first piece of live injection.
//
// How a window goes:
//  1. PTRACE_SEIZE (with PTRACE_O_TRACECLONE) and PTRACE_INTERRUPT every thread
//     listed in /proc/PID/task; re-list until no thread is new and every one
//     has reported a stop. A thread cloned meanwhile is attached by the kernel
//     (TRACECLONE) and joins the set.
//  2. Each thread's registers are read at its stop (where it will resume).
//  3. resume() detaches every thread. A signal that arrived in the window
//     stopped its thread in a signal-delivery-stop; it is handed back at
//     detach, so the target sees it as if dyni were not there. A thread that
//     was inside a blocking system call restarts it as after any other stop.
//
// Safety: nothing here writes to the target. If dynid dies at any instant the
// kernel detaches its tracees, which then run on, and a pending signal is still
// delivered. resume() therefore never needs to run for a target to be safe; it
// only ends the window sooner. The destructor resumes.
#pragma once

#include <sys/types.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include <csignal>
#include <sched.h>

#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "common/result.h"

namespace dyni {

// Every held thread has PTRACE_O_TRACESYSGOOD, so its syscall-stops report
// SIGTRAP | 0x80 (kSyscallStop). Without it a dynid killed while a thread is
// on its way into a syscall-stop (remote_syscall.h and remote_call.h run
// calls with PTRACE_SYSCALL) kills the target: the kernel's ptrace_stop(),
// finding the tracer gone, returns the stop's code, which
// ptrace_report_syscall() sends to the thread as a signal; SIGTRAP is fatal,
// 0x85 is no signal at all. (Seen in tests/live/dynid_killed: 2 targets in
// about 350 kills died of SIGTRAP.)
constexpr long kHeldOptions = PTRACE_O_TRACESYSGOOD;
constexpr int kSyscallStop = SIGTRAP | 0x80;

struct StoppedThread {
  bool stopped = false;     // reported a ptrace stop (else: seized, stop pending)
  int pending_signal = 0;   // arrived in the window; delivered at detach
  bool group_stop = false;  // stopped by job control (SIGSTOP and friends), not by us
  bool kept = false;        // held on by release_all_but (a remote call runs in it)
  user_regs_struct regs{};  // at the stop: where the thread resumes
};

// The next wait report of thread `tid` of process `pid`, which is
// running (resumed by dynid). False when it died instead: a killed process's
// leader may never report, because the kernel holds a group leader's exit
// back until every other thread is reaped, and those are dynid's tracees
// too. So the wait polls, and gives up once the thread is a zombie or gone.
bool wait_for_report(pid_t pid, pid_t tid, int& status);

class WorldStop {
 public:
  // Stops every thread of `pid` within `timeout`. On failure no thread stays
  // attached (threads already seized are resumed first) and the reason says
  // which thread did not stop. A thread seized but not yet stopped can only be
  // detached once it stops, so a failure waits for that (a thread in
  // uninterruptible sleep stops when the sleep ends).
  static Result<WorldStop> stop(pid_t pid, std::chrono::milliseconds timeout);

  WorldStop(WorldStop&& other) noexcept;
  WorldStop& operator=(WorldStop&&) = delete;
  WorldStop(const WorldStop&) = delete;
  ~WorldStop() { resume(); }

  // Detaches every thread, handing back signals that arrived in the window.
  void resume();
  // Detaches every thread but `keep`, which stays held (with no ptrace
  // options: a thread it clones is not traced). The window is over for the
  // others: a function run in `keep` may wait for locks they hold.
  void release_all_but(pid_t keep);
  // Drops `tid` from the held set after dynid detached it itself.
  void forget(pid_t tid) { threads_.erase(tid); }
  // A signal that stopped held thread `tid` while dynid ran code in it: it is
  // handed back at detach like one that arrived during the stop.
  void defer_signal(pid_t tid, int sig);

  pid_t pid() const { return pid_; }
  const std::map<pid_t, StoppedThread>& threads() const { return threads_; }
  // From the first seize to the moment every thread had stopped.
  std::chrono::microseconds stop_time() const { return stop_time_; }

 private:
  void detach_stopped(pid_t keep);
  explicit WorldStop(pid_t pid) : pid_(pid) {}
  Status seize_new_threads();
  Status wait_for_stops(std::chrono::steady_clock::time_point deadline);
  void on_wait_status(pid_t tid, int status);
  pid_t first_unstopped() const;  // 0 when every held thread has stopped
  bool all_stopped() const { return first_unstopped() == 0; }

  pid_t pid_ = 0;
  std::map<pid_t, StoppedThread> threads_;
  std::chrono::microseconds stop_time_{0};
};

// dynid's thread runs SCHED_FIFO while it holds a target's threads: once it
// releases the first ones they would preempt it, and the others wait until it
// gets to them (100 busy threads on 2 CPUs: release took 40-50 ms at nice
// -15, under EEVDF; 0.5 ms as SCHED_FIFO). Every window is bounded by its
// timeouts, and the kernel throttles RT threads that run too long. Only
// dynid's own thread changes; nice -15 where SCHED_FIFO is refused.
class RaisedPriority {
 public:
  RaisedPriority();
  ~RaisedPriority();
  RaisedPriority(const RaisedPriority&) = delete;
  RaisedPriority& operator=(const RaisedPriority&) = delete;

 private:
  static constexpr int kWindowFifoPriority = 1;
  static constexpr int kWindowNice = -15;  // where SCHED_FIFO is refused
  std::optional<std::pair<int, sched_param>> old_;
  std::optional<int> old_nice_;
};

// The windows that must happen (map, register, undo, a journal's restore):
// each try waits this long for every thread to stop.
inline constexpr std::chrono::milliseconds kWindowStopTimeout{100};

// Stops every thread, trying a few times (kWindowStopTimeout each): a thread
// may be in uninterruptible sleep at one moment and not the next.
Result<WorldStop> stop_world(pid_t pid);

}  // namespace dyni
