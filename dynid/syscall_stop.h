// Whether a thread held in or at the exit of a system call may have a call
// run in it: a system call (remote_syscall.h) or a function (remote_call.h).
// Read from its registers at the stop alone (and the memory its arguments
// point to); capture_thread() refuses what this refuses, for every call.
//
// A held thread with orig_rax >= 0 stopped in get_signal on its way to user
// space. The call it was in has either
//   - been interrupted, to be restarted (-ERESTARTSYS, -ERESTARTNOINTR,
//     -ERESTARTNOHAND: after_restart_rule() restarts it after the call), or
//   - returned: its result is in rax and the thread's next instruction is
//     the one after its `syscall`, where the kernel would run a signal
//     handler; the frame puts that result back (orig_rax -1: nothing is
//     restarted). A server's single-threaded worker is mostly met here: a
//     postgres backend between its recv and its send, or in an epoll_wait
//     the stop itself ended with EINTR (which it sees whether or not a call
//     runs).
// Refused:
//   - a call that restarts through restart_block (nanosleep, poll with a
//     timeout): after rt_sigreturn the kernel ends it with EINTR, which the
//     target would not have seen; any other internal result (-512..-530);
//   - a call still under way (rax -ENOSYS, as the kernel sets at entry): a
//     clone stopped at its PTRACE_EVENT_CLONE, which on resume writes the
//     child's tid into rax over whatever the call put there;
//   - fork, vfork, clone, clone3, execve, execveat: a new thread or child on
//     a stack not yet its own, a new program;
//   - a call that waits with a temporary signal mask (sigsuspend; ppoll,
//     pselect6, epoll_pwait, epoll_pwait2, io_pgetevents, io_uring_enter
//     given one): the kernel puts the thread's own mask back on its way out,
//     the PTRACE_SETSIGMASK of a call cancels that, and the frame would
//     restore the temporary mask for good. glibc's select() is pselect6
//     without one: accepted;
//   - a call not made by a 64-bit `syscall` (int 0x80, x32): other numbers,
//     which these rules do not know.
#pragma once

#include <sys/types.h>
#include <sys/user.h>

#include <string>

namespace dyni {

// Why no call may run in thread `tid` stopped with `regs` in (or at the
// exit of) a system call, or "" (also for a thread not in one: orig_rax < 0).
std::string why_no_call_in_syscall(pid_t tid, const user_regs_struct& regs);

}  // namespace dyni
