// One system call run inside a held thread of a target (the cache's `mmap`),
// made so that dynid dying at any instant cannot harm the thread (invariant I2).
//
// The usual way sets the thread's registers for the call, single-steps a
// `syscall` instruction and puts the registers back; a dynid killed in between
// leaves the thread running on foreign registers. Here the injected state is
// safe to resume on its own:
//  1. Below the thread's red zone, inside its own stack (dynid/thread_stack.h),
//     goes an rt_sigframe holding its whole state: the registers as they will
//     be after the kernel's syscall-restart rule, the xstate laid out as the
//     kernel would for that thread (dynid/xsave_frame.h) and the signal mask.
//     Under it, the address of a `mov rax, 15; syscall` (rt_sigreturn).
//  2. rsp points at that address, rip at a `syscall; ret` in the target's libc,
//     rax and the argument registers hold the call; every blockable signal is
//     blocked so none is taken mid-step.
//  3. PTRACE_SYSCALL runs the call to its exit stop (never a single step: a
//     thread keeps the trap flag if its tracer dies); rax holds the result.
//     The mask, then the registers, are put back exactly as they were.
// Should dynid die after step 2, the thread runs the chain alone: the call,
// then `ret` into rt_sigreturn, which restores every register, the vector
// state and the mask from the frame; the thread goes on where it was stopped,
// and an interrupted blocking call restarts. (The frame's sigaltstack field is
// deliberately invalid: the kernel then leaves the thread's alternate stack as
// it is, which it has no other way to be told.)
#pragma once

#include <sys/types.h>
#include <sys/user.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/result.h"
#include "dynid/seccomp_filter.h"
#include "dynid/thread_stack.h"
#include "dynid/world_stop.h"

namespace dyni {

// Code in the target the chain runs through (found, never written).
struct SyscallSites {
  uint64_t syscall_ret = 0;  // bytes 0f 05 c3: syscall; ret
  uint64_t sigreturn = 0;    // bytes 48 c7 c0 0f 00 00 00 0f 05: mov rax, 15; syscall
  bool seccomp = false;      // a thread ran under a seccomp filter when they were found
};

// Finds both sequences in the target's libc (read through /proc/PID/mem).
// Fails for targets without a dynamically linked libc, for threads with a
// shadow stack (the chain's `ret` would not match it) and for threads under
// strict seccomp. Threads under seccomp filters are checked call by call.
Result<SyscallSites> find_syscall_sites(pid_t pid);

// A call as the target's filters would see it when run through `sites`.
SeccompCall injected_call(const SyscallSites& sites, long nr, const std::array<uint64_t, 6>& args);

// Before the first call of a window that makes several (mapping the cache):
// whether every held thread's seccomp filters allow every one of `calls`
// (their `ip` is set here, and the chain's rt_sigreturn after each is added;
// an rt_sigreturn in `calls` is a remote call's stub, with its own `ip`), so
// that a call refused halfway never leaves the work half done. Reads one
// status file unless `sites.seccomp`. Each call is checked again, in its own
// thread, when it is armed.
Status seccomp_allows_all(const WorldStop& world, const SyscallSites& sites, std::vector<SeccompCall> calls);

// A thread with the chain armed: what step 3 needs to put back.
struct ArmedCall {
  pid_t tid = 0;
  user_regs_struct saved{};  // as at the stop, untouched (the kernel restarts an interrupted call)
  uint64_t saved_mask = 0;
};

// The building blocks, shared with remote_call.h:
// the thread's registers and mask as at its stop (refused: not held, in a
// job-control stop, with a signal to take, or in a system call where no
// call may run: syscall_stop.h) ...
Result<ArmedCall> capture_thread(const WorldStop& world, pid_t tid);
// ... and its rt_sigframe written below its red zone, inside its own stack,
// returning to `return_to`; returns the frame's address, which becomes rsp.
enum class FrameAlignment { Syscall, FunctionEntry /* rsp = 8 mod 16 */ };
struct FramePlan {
  std::vector<uint8_t> xstate;  // the frame's XSAVE area (sigframe_xstate)
  FramePlace place;             // where it goes, and the write's bounds
};
// Stack a called function gets below its frame (malloc, __register_frame):
// a thread with less is not used for function calls.
constexpr uint64_t kCallHeadroom = 64 << 10;
Result<FramePlan> plan_restore_frame(const WorldStop& world, const ArmedCall& armed, uint64_t headroom = 0);
Result<uint64_t> write_restore_frame(const WorldStop& world, const ArmedCall& armed, uint64_t return_to,
                                     FrameAlignment alignment);

// Whether `tid` could take a call now (held, restartable, room for its
// frame), without writing anything: pick a thread with this, then call once.
// A call that fails after it was armed must not be retried in another thread.
Status can_take_call(const WorldStop& world, pid_t tid, FrameAlignment alignment = FrameAlignment::Syscall);
// Whether some held thread could take a call now; else every thread's
// reason, as syscall_in_any_thread would fail ("no thread could run a
// remote call; ..."). Writes nothing.
Status any_thread_can_take_call(const WorldStop& world);

// Steps 1 and 2, after the thread's seccomp filters, if any, were run on the
// call and allow it (dynid/seccomp_filter.h): a call they would answer with a
// signal, a kill or an errno is refused before anything is written. Exposed
// so tests can kill the tracer with the chain armed.
Result<ArmedCall> arm_syscall(const WorldStop& world, pid_t tid, const SyscallSites& sites, long nr,
                              const std::array<uint64_t, 6>& args);

// Steps 1 to 3: the raw kernel result (a negative errno on failure).
Result<long> remote_syscall(WorldStop& world, pid_t tid, const SyscallSites& sites, long nr,
                            const std::array<uint64_t, 6>& args);

// The call, run once in the first held thread that can take one (threads
// whose stack cannot hold the frame, or in a job-control stop, are passed
// over before anything is written): the thread and the raw result. A call
// that fails once armed is not retried elsewhere: it may have run (mmap
// twice, or munmap of what the target mapped meanwhile, would harm it).
Result<std::pair<pid_t, long>> syscall_in_any_thread(WorldStop& world, const SyscallSites& sites, long nr,
                                                     const std::array<uint64_t, 6>& args);

// A thread stopped inside a blocking system call the kernel will restart
// (rax -ERESTARTSYS, -ERESTARTNOINTR or -ERESTARTNOHAND).
bool in_restartable_call(const user_regs_struct& regs);
// PTRACE_SETREGS of a held thread.
Status set_regs(pid_t tid, const user_regs_struct& regs);

// The registers the thread resumes with after `regs` (a ptrace stop), as the
// kernel's syscall-restart rule makes them: an interrupted call that restarts
// goes back to its `syscall` instruction. Pure; unit-tested.
user_regs_struct after_restart_rule(const user_regs_struct& regs);

// Builds the rt_sigframe image of step 1 for a frame placed at `frame_addr`
// (its first 8 bytes are the return address). `xstate_area` is the frame's
// XSAVE area as sigframe_xstate() makes it (dynid/xsave_frame.h), MAGIC2
// included. Pure; unit-tested.
Result<std::vector<uint8_t>> build_sigframe(uint64_t frame_addr, uint64_t sigreturn, const user_regs_struct& regs,
                                            uint64_t mask, const std::vector<uint8_t>& xstate_area);

}  // namespace dyni
