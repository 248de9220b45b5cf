// Whether a thread held in a system call may take a call (syscall_stop.h).
#include "dynid/syscall_stop.h"

#include <sys/syscall.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "dynid/remote_syscall.h"
#include "dynid/target_memory.h"

namespace dyni {
namespace {

constexpr long kErestartRestartblock = -516;  // the kernel's ERESTART_RESTARTBLOCK
constexpr long kX32SyscallBit = 0x40000000;

// The first 8 bytes at `addr` in thread `tid`, or nullopt when unreadable.
std::optional<uint64_t> read_word(pid_t tid, uint64_t addr) {
  auto bytes = read_target(tid, addr, 8);
  if (!bytes || bytes->size() != 8) return std::nullopt;
  uint64_t word = 0;
  std::memcpy(&word, bytes->data(), 8);
  return word;
}

// Whether system call `regs.orig_rax` was given a signal mask to wait with
// (its arguments are still in their registers at the stop): ppoll's 4th,
// epoll_pwait's 5th, pselect6's and io_pgetevents' through the struct their
// 6th points to, io_uring_enter's 5th (or the getevents_arg it points to
// with IORING_ENTER_EXT_ARG; a registered one, IORING_ENTER_EXT_ARG_REG,
// cannot be read); sigsuspend's always. Unreadable counts as given.
bool waits_with_a_mask(pid_t tid, const user_regs_struct& regs) {
  constexpr unsigned long long kIoringEnterExtArg = 1u << 3, kIoringEnterExtArgReg = 1u << 6;
  switch (static_cast<long>(regs.orig_rax)) {
    case SYS_rt_sigsuspend: return true;
    case SYS_ppoll: return regs.r10 != 0;
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2: return regs.r8 != 0;
    case SYS_pselect6:
    case SYS_io_pgetevents: return regs.r9 != 0 && read_word(tid, regs.r9).value_or(1) != 0;
    case SYS_io_uring_enter:
      if (regs.r10 & kIoringEnterExtArgReg) return true;
      if (regs.r8 == 0) return false;
      return !(regs.r10 & kIoringEnterExtArg) || read_word(tid, regs.r8).value_or(1) != 0;
    default: return false;
  }
}

// Why a call that has returned (not to be restarted) leaves no room for a
// call at its exit, or "".
std::string why_not_after(long nr, long ret) {
  if (ret == kErestartRestartblock)
    return "in a system call that restarts through restart_block (nanosleep, poll with a timeout)";
  if (ret <= -512 && ret >= -530) return fmt::format("at the exit of system call {} with internal result {}", nr, ret);
  if (ret == -ENOSYS) return fmt::format("in the middle of system call {} (a clone at its event stop)", nr);
  return "";
}

}  // namespace

std::string why_no_call_in_syscall(pid_t tid, const user_regs_struct& regs) {
  const long nr = static_cast<long>(regs.orig_rax);
  if (nr < 0) return "";
  if (nr & kX32SyscallBit) return fmt::format("in x32 system call {:#x}", nr);
  // A call the kernel set up to restart (ERESTARTNOHAND and the like, with
  // no handler run): rip is back on its `syscall` and rax holds its number
  // again, the thread between two entries of one call.
  if (regs.rax == regs.orig_rax) {
    auto at = read_target(tid, regs.rip, 2);
    if (at && at->size() == 2 && (*at)[0] == 0x0f && (*at)[1] == 0x05)
      return fmt::format("about to restart system call {}", nr);
  }
  auto before = read_target(tid, regs.rip - 2, 2);
  if (!before || before->size() != 2 || (*before)[0] != 0x0f || (*before)[1] != 0x05)
    return fmt::format("in system call {}, not made by a syscall instruction", nr);
  if (waits_with_a_mask(tid, regs))
    return fmt::format("in system call {}, which waits with a temporary signal mask", nr);
  for (long starts : {SYS_fork, SYS_vfork, SYS_clone, SYS_clone3, SYS_execve, SYS_execveat})
    if (nr == starts) return fmt::format("in system call {} (fork, clone or exec)", nr);
  if (in_restartable_call(regs)) return "";
  return why_not_after(nr, static_cast<long>(regs.rax));
}

}  // namespace dyni
