// Whether a held thread may run a function of the target.
#include "dynid/clean_thread.h"

#include <array>

#include <fmt/format.h>

#include <sys/ptrace.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "dynid/remote_syscall.h"
#include "dynid/target_memory.h"

namespace dyni {
namespace {

constexpr long kErestartRestartblock = -516;  // the kernel's ERESTART_RESTARTBLOCK

constexpr std::array<std::string_view, 22> kLockHolders = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc", "valloc",
    "pvalloc", "malloc_trim", "malloc_info", "malloc_stats", "mallinfo", "mallinfo2", "cfree", "fork", "_Fork",
    "__libc_fork", "dl_iterate_phdr", "_dl_find_object", "__frame_state_for"};
// glibc's allocator is __libc_malloc, __libc_calloc, __libc_memalign, ...
// (the public names are weak aliases, and a symbolizer may show either) over
// _int_malloc and friends.
constexpr std::array<std::string_view, 15> kLockHolderPrefixes = {
    "_Unwind_",       "__register_frame", "__deregister_frame", "_dl_",          "__libc_malloc",
    "__libc_free",    "__libc_calloc",    "__libc_realloc",     "__libc_memalign", "__libc_valloc",
    "__libc_pvalloc", "__libc_mallopt",   "__libc_mallinfo",    "__libc_fork",     "_int_"};

std::string_view basename(std::string_view path) { return path.substr(path.rfind('/') + 1); }

// Why a thread stopped on its way out of a system call that is not
// restarted cannot take a call there, or "". Such a call has returned: its
// result is in rax and the thread's next instruction is the one after its
// `syscall`, where the kernel would run a signal handler; the frame puts
// that result back (orig_rax -1: nothing is restarted). A server's
// single-threaded worker is mostly met here: a postgres backend between its
// recv and its send, or in an epoll_wait that the stop itself ended with
// EINTR (which it sees whether or not a call runs).
// Not after a call that restarts through restart_block (nanosleep, poll
// with a timeout): after a handler's return the kernel ends it with EINTR,
// which the target would not have seen. Not after fork, clone or exec: a
// new thread or child on a stack not yet its own, a new program.
std::string why_not_after_syscall(const user_regs_struct& regs) {
  const long nr = static_cast<long>(regs.orig_rax);
  const long ret = static_cast<long>(regs.rax);
  if (ret == kErestartRestartblock)
    return "in a system call that restarts through restart_block (nanosleep, poll with a timeout)";
  if (ret <= -512 && ret >= -530) return fmt::format("at the exit of system call {} with internal result {}", nr, ret);
  for (long starts : {SYS_fork, SYS_vfork, SYS_clone, SYS_clone3, SYS_execve, SYS_execveat})
    if (nr == starts) return fmt::format("at the exit of system call {} (fork, clone or exec)", nr);
  return "";
}

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
// with IORING_ENTER_EXT_ARG); sigsuspend's always. Unreadable counts as given.
bool waits_with_a_mask(pid_t tid, const user_regs_struct& regs) {
  constexpr unsigned long long kIoringEnterExtArg = 1u << 3;
  switch (static_cast<long>(regs.orig_rax)) {
    case SYS_rt_sigsuspend: return true;
    case SYS_ppoll: return regs.r10 != 0;
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2: return regs.r8 != 0;
    case SYS_pselect6:
    case SYS_io_pgetevents: return regs.r9 != 0 && read_word(tid, regs.r9).value_or(1) != 0;
    case SYS_io_uring_enter:
      if (regs.r8 == 0) return false;
      return !(regs.r10 & kIoringEnterExtArg) || read_word(tid, regs.r8).value_or(1) != 0;
    default: return false;
  }
}

// Why thread `tid`, in (or on its way out of) a system call, cannot take a
// call whatever the call's result, or "".
// - A call that waits with a temporary signal mask (sigsuspend; ppoll,
//   pselect6, epoll_pwait given one) leaves the thread's own mask to be put
//   back on its way to user space; the PTRACE_SETSIGMASK of a remote call
//   cancels that, and the frame would restore the temporary mask for good.
//   (glibc's select() is pselect6 without one: accepted.)
// - A call not made by `syscall` (int 0x80: i386 numbers, which the rules
//   here do not know).
std::string why_not_in_syscall(pid_t tid, const user_regs_struct& regs) {
  const long nr = static_cast<long>(regs.orig_rax);
  auto before = read_target(tid, regs.rip - 2, 2);
  if (!before || before->size() != 2 || (*before)[0] != 0x0f || (*before)[1] != 0x05)
    return fmt::format("in system call {}, not made by a syscall instruction", nr);
  if (waits_with_a_mask(tid, regs))
    return fmt::format("in system call {}, which waits with a temporary signal mask", nr);
  return "";
}

}  // namespace

bool holds_call_locks(std::string_view name) {
  for (std::string_view n : kLockHolders)
    if (name == n) return true;
  for (std::string_view p : kLockHolderPrefixes)
    if (name.starts_with(p)) return true;
  return false;
}

bool module_holds_call_locks(std::string_view path) {
  std::string_view base = basename(path);
  for (std::string_view m : {"libgcc_s.so", "ld-linux", "libunwind", "libjemalloc", "libtcmalloc", "libmimalloc"})
    if (base.starts_with(m)) return true;
  return false;
}

// Whether the thread may be inside an rseq critical section: its rseq area's
// rseq_cs is set (the kernel clears it lazily, so this may be a moment after
// one; another moment is found). Unknown (no PTRACE_GET_RSEQ_CONFIGURATION,
// kernels before 5.13) counts as inside.
bool maybe_in_rseq_section(pid_t tid) {
  struct {
    uint64_t rseq_abi_pointer;
    uint32_t rseq_abi_size, signature, flags, pad;
  } config{};
  constexpr long kGetRseqConfiguration = 0x420f;
  if (::ptrace(static_cast<__ptrace_request>(kGetRseqConfiguration), tid, sizeof config, &config) !=
      static_cast<long>(sizeof config))
    return true;
  if (config.rseq_abi_pointer == 0) return false;  // not registered
  auto rseq_cs = read_target(tid, config.rseq_abi_pointer + 8, 8);
  return !rseq_cs || std::any_of(rseq_cs->begin(), rseq_cs->end(), [](uint8_t b) { return b != 0; });
}

Status clean_for_calls(pid_t tid, const StoppedThread& thread, const ThreadStack& stack,
                       const profiler::Symbolizer& symbols, std::string_view executable, const CopiedFrom& copied_from) {
  // A PC in a copy is looked up as the function it copies.
  auto locate = [&](uint64_t pc) {
    std::optional<uint64_t> original = copied_from ? copied_from(pc) : std::nullopt;
    return symbols.locate(original ? *original : pc);
  };
  // Parked in a system call the kernel restarts, at the exit of one that has
  // returned, or stopped in the executable's own code (a CPU-bound thread,
  // maybe the only one): the call then runs as a signal handler would at
  // that instruction. Only there: a library's code may hold a lock its
  // callers' frames do not show (an allocator's tail calls, an inlined lock).
  bool in_user_code = static_cast<long>(thread.regs.orig_rax) < 0;
  if (!in_user_code)
    if (std::string why = why_not_in_syscall(tid, thread.regs); !why.empty()) return fail(why);
  if (!in_user_code && !in_restartable_call(thread.regs))
    if (std::string why = why_not_after_syscall(thread.regs); !why.empty()) return fail(why);
  if (in_user_code) {
    profiler::Location at = locate(thread.regs.rip);
    if (executable.empty() || at.module < 0 || symbols.modules()[static_cast<std::size_t>(at.module)].path != executable)
      return fail("stopped in code outside the executable");
    if (maybe_in_rseq_section(tid)) return fail("maybe inside an rseq critical section");
  }
  if (!stack.complete) return fail("stack not known to its end: " + stack.incomplete_why);
  for (std::size_t i = 0; i < stack.frames.size(); ++i) {
    const StackFrame& f = stack.frames[i];
    if (f.signal_frame) return fail("inside a signal handler");
    // A return address points past its call: look up the call itself.
    profiler::Location at = locate(i == 0 ? f.pc : f.pc - 1);
    if (at.module < 0) return fail(fmt::format("frame {:#x} is not in file-backed code", f.pc));
    const profiler::Module& m = symbols.modules()[static_cast<std::size_t>(at.module)];
    if (module_holds_call_locks(m.path)) return fail(fmt::format("a frame in {}", basename(m.path)));
    if (at.function && holds_call_locks(at.function->name)) return fail(fmt::format("a frame in {}", at.function->name));
  }
  return ok();
}

}  // namespace dyni
