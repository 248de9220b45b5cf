// A function of the target run in one of its threads, kill-safe.
#include "dynid/remote_call.h"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "dynid/seccomp_filter.h"

namespace dyni {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `tid`'s next stop until `deadline`; 0 on timeout.
Result<int> wait_stop(pid_t tid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(tid, &status, __WALL | WNOHANG);
    if (r == tid) {
      if (!WIFSTOPPED(status)) return fail(fmt::format("thread {} ended during a remote call", tid));
      return status;
    }
    if (r < 0 && errno != EINTR) return fail(sys_error(fmt::format("waitpid of thread {}", tid)));
    if (Clock::now() >= deadline) return 0;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Gives up on a call that runs too long: stop the thread wherever it is and
// detach it; it finishes the call and restores itself through the stub.
Status abandon(WorldStop& world, pid_t tid) {
  ::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  int status = 0;
  if (wait_for_report(world.pid(), tid, status) && WIFSTOPPED(status)) ::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  world.forget(tid);
  return fail(fmt::format("thread {}: the remote call did not return in time; it finishes on its own", tid));
}

// Runs the thread with syscall tracing until the stub's rt_sigreturn enters;
// returns the function's result (rdi there).
Result<uint64_t> run_to_stub(WorldStop& world, pid_t tid, uint64_t stub, Clock::time_point deadline) {
  const uint64_t sigreturn_next = stub + kReturnStub.size();
  for (;;) {
    if (::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) != 0)
      return fail(sys_error(fmt::format("PTRACE_SYSCALL of thread {}", tid)));
    auto status = wait_stop(tid, deadline);
    if (!status) return std::unexpected(status.error());
    if (*status == 0) return std::unexpected(abandon(world, tid).error());
    user_regs_struct regs{};
    if (::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0)
      return fail(sys_error(fmt::format("PTRACE_GETREGS of thread {}", tid)));
    if ((*status >> 16) != 0) continue;  // an event stop (a group stop): nothing to hand back
    if (WSTOPSIG(*status) != kSyscallStop) {
      world.defer_signal(tid, WSTOPSIG(*status));  // a signal (SIGSTOP): handed back at detach
      continue;
    }
    if (regs.rip == sigreturn_next && static_cast<long>(regs.orig_rax) == SYS_rt_sigreturn) return regs.rdi;
  }
}

constexpr unsigned long long kHandlerClearedFlags = (1ULL << 8) | (1ULL << 10) | (1ULL << 16) | (1ULL << 18);  // TF DF RF AC

}  // namespace

Result<uint64_t> remote_call(WorldStop& world, pid_t tid, const RemoteCall& call, std::chrono::milliseconds timeout) {
  // Both refuse before anything is written: a thread not held, with a signal
  // to take or in a restart_block call; a stack without room for the frame
  // and the function's own 64 KiB (kCallHeadroom).
  auto armed = capture_thread(world, tid);
  if (!armed) return std::unexpected(armed.error());
  // The stub returns through rt_sigreturn, which the thread's seccomp
  // filters, if any, see like any call: they must let it through. (Its
  // argument registers are what the function left; rdi its result. A filter
  // that lets signal handlers return does not look at them.) The function's
  // own calls are the target's code's, made as the target makes them.
  const SeccompCall sigreturn = stub_sigreturn(call.return_stub);
  if (auto r = seccomp_lets_through(world.pid(), tid, {&sigreturn, 1}); !r) return std::unexpected(r.error());
  auto frame = write_restore_frame(world, *armed, call.return_stub, FrameAlignment::FunctionEntry);
  if (!frame) return std::unexpected(frame.error());
  user_regs_struct regs = armed->saved;
  regs.rip = call.function;
  regs.rsp = *frame;
  regs.rax = 0;  // no vector arguments (varargs convention)
  regs.orig_rax = static_cast<unsigned long long>(-1);
  // The flags a signal handler starts with: the ABI wants the direction flag
  // clear at a call (a thread stopped in its own code may be inside a
  // backward string copy); no trap, resume or alignment-check flag. The
  // frame restores the thread's own flags.
  regs.eflags &= ~kHandlerClearedFlags;
  regs.rdi = call.args[0], regs.rsi = call.args[1], regs.rdx = call.args[2];
  regs.rcx = call.args[3], regs.r8 = call.args[4], regs.r9 = call.args[5];
  if (auto r = set_regs(tid, regs); !r) return std::unexpected(r.error());
  uint64_t all = ~uint64_t{0};
  if (::ptrace(PTRACE_SETSIGMASK, tid, sizeof all, &all) != 0)
    return fail(sys_error(fmt::format("PTRACE_SETSIGMASK of thread {}", tid)));

  world.release_all_but(tid);
  auto result = run_to_stub(world, tid, call.return_stub, Clock::now() + timeout);
  if (!result) return std::unexpected(result.error());
  // Through rt_sigreturn (the kernel restores state and mask from the frame),
  // then the registers exactly as at the stop.
  if (::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) != 0)
    return fail(sys_error(fmt::format("PTRACE_SYSCALL of thread {}", tid)));
  auto status = wait_stop(tid, Clock::now() + std::chrono::seconds(5));
  if (!status) return std::unexpected(status.error());
  if (*status == 0) return std::unexpected(abandon(world, tid).error());
  if (auto r = set_regs(tid, armed->saved); !r) return std::unexpected(r.error());
  return *result;
}

}  // namespace dyni
