// ptrace stop-the-world for one target: seize, interrupt, re-list, detach.
#include "dynid/world_stop.h"

#include "dynid/proc_reader.h"

#include <signal.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/log.h"

namespace dyni {
namespace {

using Clock = std::chrono::steady_clock;

// Why PTRACE_SEIZE of a listed thread said EPERM: the kernel attached it for
// us already (TRACECLONE, its event not read yet), or it is exiting (a thread
// past exit cannot be attached), or something else holds it.
enum class SeizeRefusal { OursAlready, Exiting, Other };

SeizeRefusal why_refused(pid_t pid, pid_t tid) {
  auto status = read_file(fmt::format("/proc/{}/task/{}/status", pid, tid), 1 << 16);
  if (!status) return SeizeRefusal::Exiting;  // gone by now
  if (std::atoi(status_field(*status, "TracerPid:").c_str()) == ::getpid()) return SeizeRefusal::OursAlready;
  std::string state = status_field(*status, "State:");
  std::size_t letter = state.find_first_not_of(" \t");
  if (letter != std::string::npos && (state[letter] == 'Z' || state[letter] == 'X')) return SeizeRefusal::Exiting;
  return SeizeRefusal::Other;
}

// Why a thread another process traces cannot be stopped, for people: a
// debugger (gdb -p, strace -p) holds it until it detaches. "" when none does.
std::string traced_by_other(pid_t pid, pid_t tid) {
  auto status = read_file(fmt::format("/proc/{}/task/{}/status", pid, tid), 1 << 16);
  const int tracer = status ? std::atoi(status_field(*status, "TracerPid:").c_str()) : 0;
  if (tracer == 0 || tracer == ::getpid()) return "";
  auto comm = read_file(fmt::format("/proc/{}/comm", tracer), 256);
  std::string name = comm ? comm->substr(0, comm->find('\n')) : "?";
  return fmt::format("process {} is traced by pid {} ({}): a debugger holds it; detach it (quit gdb, strace) and "
                     "try again", pid, tracer, name);
}

}  // namespace

WorldStop::WorldStop(WorldStop&& other) noexcept
    : pid_(other.pid_), threads_(std::move(other.threads_)), stop_time_(other.stop_time_) {
  other.threads_.clear();
}

Result<WorldStop> WorldStop::stop(pid_t pid, std::chrono::milliseconds timeout) {
  WorldStop w(pid);
  const auto start = Clock::now(), deadline = start + timeout;
  // Re-list until a listing shows no thread we do not hold and all have
  // stopped: a thread cloned before its creator stopped shows up here or as a
  // TRACECLONE event, and is then held like the others.
  if (auto r = w.seize_new_threads(); !r) return std::unexpected(r.error());  // w resumes what it holds
  for (;;) {
    if (auto r = w.wait_for_stops(deadline); !r) return std::unexpected(r.error());
    std::size_t held = w.threads_.size();
    if (auto r = w.seize_new_threads(); !r) return std::unexpected(r.error());
    if (w.threads_.size() == held && w.all_stopped()) break;
  }
  if (w.threads_.empty()) return fail(fmt::format("process {} is gone", pid));
  for (auto& [tid, t] : w.threads_) {
    if (::ptrace(PTRACE_GETREGS, tid, nullptr, &t.regs) != 0)
      return fail(sys_error(fmt::format("PTRACE_GETREGS of thread {}", tid)));
  }
  w.stop_time_ = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  return w;
}

// Seizes and interrupts every listed thread not yet held. A thread that exits
// meanwhile is skipped; one the kernel already attached for us (TRACECLONE,
// its event not read yet) is held without a second seize.
Status WorldStop::seize_new_threads() {
  for (pid_t tid : list_numeric_entries(fmt::format("/proc/{}/task", pid_))) {
    if (threads_.count(tid)) continue;
    if (::ptrace(PTRACE_SEIZE, tid, nullptr, kHeldOptions | PTRACE_O_TRACECLONE) != 0) {
      int err = errno;
      if (err == ESRCH) continue;  // exited between listing and seizing
      SeizeRefusal why = err == EPERM ? why_refused(pid_, tid) : SeizeRefusal::Other;
      if (why == SeizeRefusal::Exiting) continue;
      if (why == SeizeRefusal::OursAlready) {
        threads_[tid] = {};
        continue;
      }
      if (std::string traced = err == EPERM ? traced_by_other(pid_, tid) : ""; !traced.empty()) return fail(traced);
      return fail(sys_error(fmt::format("PTRACE_SEIZE of thread {} of process {}", tid, pid_), err));
    }
    threads_[tid] = {};
    if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno != ESRCH)
      return fail(sys_error(fmt::format("PTRACE_INTERRUPT of thread {}", tid)));
  }
  return ok();
}

bool wait_for_report(pid_t pid, pid_t tid, int& status) {
  const std::string tasks = fmt::format("/proc/{}/task", pid);
  std::chrono::microseconds pause{20};
  for (;;) {
    pid_t r = ::waitpid(tid, &status, __WALL | WNOHANG);
    if (r == tid) return true;
    if (r < 0 && errno != EINTR) return false;
    // Dead: a zombie, or gone from /proc. A stat dynid could not read for
    // another reason (out of descriptors) proves nothing: keep waiting.
    auto st = read_proc_stat(tasks, tid);
    const std::string dir = tasks + "/" + std::to_string(tid);
    bool dead = st ? st->state == 'Z' || st->state == 'X' : ::access(dir.c_str(), F_OK) != 0 && errno == ENOENT;
    if (dead) return ::waitpid(tid, &status, __WALL | WNOHANG) == tid;  // it may have reported as it died
    // Backing off to 1 ms: dynid may run SCHED_FIFO here, beside the target.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

// Collects stop reports until every held thread has stopped or exited.
Status WorldStop::wait_for_stops(Clock::time_point deadline) {
  while (!all_stopped()) {
    bool any = false;
    for (auto it = threads_.begin(); it != threads_.end();) {
      pid_t tid = it->first;
      bool stopped = it->second.stopped;
      ++it;  // on_wait_status may erase tid's entry or add clones
      if (stopped) continue;
      int status = 0;
      pid_t r = ::waitpid(tid, &status, __WALL | WNOHANG);
      if (r == tid) {
        on_wait_status(tid, status);
        any = true;
      } else if (r < 0 && errno == ECHILD) {
        threads_.erase(tid);  // reaped elsewhere: it is gone
        any = true;
      }
    }
    if (pid_t late = first_unstopped(); late > 0 && Clock::now() > deadline)
      return fail(fmt::format("thread {} of process {} did not stop in time (uninterruptible sleep?)", late, pid_));
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return ok();
}

// One waitpid report of a held thread.
void WorldStop::on_wait_status(pid_t tid, int status) {
  if (WIFEXITED(status) || WIFSIGNALED(status)) {
    threads_.erase(tid);
    return;
  }
  if (!WIFSTOPPED(status)) return;
  StoppedThread& t = threads_[tid];
  t.stopped = true;
  int event = status >> 16;
  if (event == PTRACE_EVENT_CLONE) {
    unsigned long child = 0;
    if (::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child) == 0 && child > 0)
      threads_.try_emplace(static_cast<pid_t>(child));  // attached by the kernel; its first stop is coming
  } else if (event == 0 && WSTOPSIG(status) != kSyscallStop) {
    // A signal-delivery-stop: the signal arrived in the window. The thread stays
    // stopped here; detach delivers the signal.
    t.pending_signal = WSTOPSIG(status);
  }
  // PTRACE_EVENT_STOP: our interrupt (SIGTRAP), or a group-stop (the target
  // is being stopped by SIGSTOP and friends, and stays so after detach).
  if (event == PTRACE_EVENT_STOP && WSTOPSIG(status) != SIGTRAP) t.group_stop = true;
}

void WorldStop::defer_signal(pid_t tid, int sig) {
  auto it = threads_.find(tid);
  if (it == threads_.end()) return;
  if (it->second.pending_signal == 0 || it->second.pending_signal == sig) {
    it->second.pending_signal = sig;
    return;
  }
  // Detach hands back one signal; send the second again (it is not lost,
  // though a real-time signal's value would be).
  log::warn("inject: pid {}: thread {} already holds signal {}; signal {} sent again", pid_, tid,
            it->second.pending_signal, sig);
  ::syscall(SYS_tgkill, pid_, tid, sig);
}

pid_t WorldStop::first_unstopped() const {
  for (const auto& [tid, t] : threads_)
    if (!t.stopped) return tid;
  return 0;
}

void WorldStop::resume() { release_all_but(0); }

void WorldStop::release_all_but(pid_t keep) {
  // The stopped threads first: one that has not stopped yet (uninterruptible
  // sleep: fsync, a vfork parent) must not keep the others waiting.
  detach_stopped(keep);
  // A thread seized but not yet stopped cannot be detached: wait for its stop
  // (its interrupt is pending). Its report may name a clone, which is then
  // waited for and detached like the others. Only dynid waits meanwhile.
  for (pid_t tid = first_unstopped(); tid > 0; tid = first_unstopped()) {
    int status = 0;
    if (wait_for_report(pid_, tid, status))
      on_wait_status(tid, status);
    else
      threads_.erase(tid);  // gone (or dead and held back: a leader)
    detach_stopped(keep);
  }
}

void WorldStop::detach_stopped(pid_t keep) {
  for (auto it = threads_.begin(); it != threads_.end();) {
    auto& [tid, t] = *it;
    if (!t.stopped) {
      ++it;
      continue;
    }
    if (tid == keep) {
      if (!t.kept) ::ptrace(PTRACE_SETOPTIONS, tid, nullptr, kHeldOptions);  // no more clone events
      t.kept = true;
      ++it;
      continue;
    }
    if (::ptrace(PTRACE_DETACH, tid, nullptr, t.pending_signal) != 0 && errno != ESRCH)
      log::warn("inject: pid {}: PTRACE_DETACH of thread {} failed: {}", pid_, tid, errno_text());
    it = threads_.erase(it);
  }
}

RaisedPriority::RaisedPriority() {
  const pid_t self = static_cast<pid_t>(::gettid());
  int policy = ::sched_getscheduler(self);
  sched_param old{};
  if (policy >= 0 && ::sched_getparam(self, &old) == 0) {
    sched_param fifo{};
    fifo.sched_priority = kWindowFifoPriority;
    if (::sched_setscheduler(self, SCHED_FIFO, &fifo) == 0) {
      old_ = std::pair{policy, old};
      return;
    }
  }
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(self));
  if (errno == 0 && ::setpriority(PRIO_PROCESS, static_cast<id_t>(self), kWindowNice) == 0) old_nice_ = nice;
}

RaisedPriority::~RaisedPriority() {
  const pid_t self = static_cast<pid_t>(::gettid());
  if (old_) ::sched_setscheduler(self, old_->first, &old_->second);
  if (old_nice_) ::setpriority(PRIO_PROCESS, static_cast<id_t>(self), *old_nice_);
}

Result<WorldStop> stop_world(pid_t pid) {
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    auto w = WorldStop::stop(pid, kWindowStopTimeout);
    if (w || attempt == kAttempts) return w;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace dyni
