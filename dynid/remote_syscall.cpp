// A system call run in a held thread, safe against dynid dying mid-call.
#include "dynid/proc_reader.h"
#include "dynid/remote_syscall.h"
#include "dynid/syscall_stop.h"

#include <elf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "dynid/target_memory.h"
#include "dynid/thread_stack.h"
#include "dynid/xsave_frame.h"
#include "profiler/process_maps.h"

namespace dyni {
namespace {

// The kernel's x86-64 signal frame (arch/x86/include/asm/sigframe.h,
// uapi asm/sigcontext.h, asm-generic/ucontext.h), as rt_sigreturn reads it.
struct KernelSigcontext {
  uint64_t r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags;
  uint16_t cs, gs, fs, ss;
  uint64_t err, trapno, oldmask, cr2, fpstate;
  uint64_t reserved1[8];
};
static_assert(sizeof(KernelSigcontext) == 256);
static_assert(offsetof(KernelSigcontext, fpstate) == 184);

struct KernelUcontext {
  uint64_t uc_flags, uc_link;
  uint64_t ss_sp;
  int32_t ss_flags, ss_pad;
  uint64_t ss_size;
  KernelSigcontext mcontext;
  uint64_t sigmask;
};
static_assert(sizeof(KernelUcontext) == 304);
static_assert(offsetof(KernelUcontext, mcontext) == 40);

constexpr uint64_t kUcFpXstate = 0x1, kUcSigcontextSs = 0x2, kUcStrictRestoreSs = 0x4;
constexpr std::size_t kSiginfoBytes = 128;
// pretcode, ucontext, siginfo; the xstate follows, 64-byte aligned.
constexpr std::size_t kXstateOffset = 448;
static_assert(kXstateOffset >= 8 + sizeof(KernelUcontext) + kSiginfoBytes && kXstateOffset % 64 == 0);

// Kernel-internal syscall results that make it restart the call on resume.
constexpr long kErestartsys = -512, kErestartnointr = -513, kErestartnohand = -514;

constexpr std::string_view kSyscallRet("\x0f\x05\xc3", 3);
constexpr std::string_view kSigreturn("\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05", 9);

// Where the XSAVE area starts in a frame at `frame_addr`: 64-byte aligned,
// past pretcode, ucontext and siginfo (448 for an aligned frame, 440 for one
// 8 bytes past alignment).
std::size_t xstate_offset(uint64_t frame_addr) {
  uint64_t min = frame_addr + 8 + sizeof(KernelUcontext) + kSiginfoBytes;
  return static_cast<std::size_t>(((min + 63) & ~uint64_t{63}) - frame_addr);
}

Result<std::vector<uint8_t>> read_xstate(pid_t tid) {
  std::vector<uint8_t> buf(1 << 16);  // the kernel fills what the CPU has (11 KB with AMX)
  iovec iov{buf.data(), buf.size()};
  if (::ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return fail(sys_error(fmt::format("PTRACE_GETREGSET NT_X86_XSTATE of thread {}", tid)));
  buf.resize(iov.iov_len);
  return buf;
}

Status set_mask(pid_t tid, uint64_t mask) {
  if (::ptrace(PTRACE_SETSIGMASK, tid, sizeof mask, &mask) != 0)
    return fail(sys_error(fmt::format("PTRACE_SETSIGMASK of thread {}", tid)));
  return ok();
}

// Why no call may be injected into `pid`, from each thread's status, or "":
//  - "x86_Thread_features: shstk" (kernels with user shadow stacks): the
//    chain's `ret` would fault against the shadow stack;
//  - "Seccomp: 1": strict mode allows no call dyni makes (DESIGN.md §7).
// Both are per thread. "Seccomp: 2" (a filter, systemd's SystemCallFilter=)
// sets `seccomp`: each call is then run through the thread's filters first.
std::string refusal_from_status(pid_t pid, bool& seccomp) {
  for (pid_t tid : list_numeric_entries(fmt::format("/proc/{}/task", pid))) {
    auto status = read_file(fmt::format("/proc/{}/task/{}/status", pid, tid), 1 << 16);
    if (!status) continue;
    if (status_field(*status, "x86_Thread_features:").find("shstk") != std::string::npos)
      return "the target uses shadow stacks";
    const char mode = seccomp_mode(*status);
    if (mode == '0') continue;
    if (mode != '2')
      return fmt::format("thread {} runs under seccomp mode {} (1: strict): it can make no call dyni needs", tid, mode);
    seccomp = true;
  }
  return "";
}

}  // namespace

bool in_restartable_call(const user_regs_struct& regs) {
  long ret = static_cast<long>(regs.rax);
  return static_cast<long>(regs.orig_rax) >= 0 &&
         (ret == kErestartsys || ret == kErestartnointr || ret == kErestartnohand);
}

Status set_regs(pid_t tid, const user_regs_struct& regs) {
  if (::ptrace(PTRACE_SETREGS, tid, nullptr, &regs) != 0)
    return fail(sys_error(fmt::format("PTRACE_SETREGS of thread {}", tid)));
  return ok();
}

user_regs_struct after_restart_rule(const user_regs_struct& regs) {
  user_regs_struct r = regs;
  if (in_restartable_call(regs)) {
    r.rax = regs.orig_rax;
    r.rip -= 2;  // back onto the `syscall` instruction
  }
  r.orig_rax = static_cast<unsigned long long>(-1);
  return r;
}

Result<std::vector<uint8_t>> build_sigframe(uint64_t frame_addr, uint64_t sigreturn, const user_regs_struct& regs,
                                            uint64_t mask, const std::vector<uint8_t>& xstate_area) {
  if (frame_addr % 64 != 0 && frame_addr % 64 != 8) return fail("signal frame address not 64-byte aligned (or 8 past)");
  if (xstate_area.size() < 580) return fail("the XSAVE area of a signal frame is shorter than 580 bytes");
  KernelUcontext uc{};
  uc.uc_flags = kUcFpXstate | kUcSigcontextSs | kUcStrictRestoreSs;
  uc.ss_flags = 3;  // no valid mode: rt_sigreturn then leaves the alternate stack alone
  KernelSigcontext& sc = uc.mcontext;
  sc.r8 = regs.r8, sc.r9 = regs.r9, sc.r10 = regs.r10, sc.r11 = regs.r11;
  sc.r12 = regs.r12, sc.r13 = regs.r13, sc.r14 = regs.r14, sc.r15 = regs.r15;
  sc.rdi = regs.rdi, sc.rsi = regs.rsi, sc.rbp = regs.rbp, sc.rbx = regs.rbx;
  sc.rdx = regs.rdx, sc.rax = regs.rax, sc.rcx = regs.rcx, sc.rsp = regs.rsp, sc.rip = regs.rip;
  sc.eflags = regs.eflags;
  sc.cs = static_cast<uint16_t>(regs.cs), sc.ss = static_cast<uint16_t>(regs.ss);
  const std::size_t xstate_at = xstate_offset(frame_addr);
  sc.fpstate = frame_addr + xstate_at;
  uc.sigmask = mask;

  std::vector<uint8_t> frame(xstate_at + xstate_area.size(), 0);
  std::memcpy(frame.data(), &sigreturn, 8);
  std::memcpy(frame.data() + 8, &uc, sizeof uc);
  std::memcpy(frame.data() + xstate_at, xstate_area.data(), xstate_area.size());
  return frame;
}

namespace {

// The first place in `file` (the mapping's bytes in its file) where `seq`
// lies with the live bytes (`live`) still the file's: bytes dyni patched into
// libc (an entry's jmp, a call's new target) may form the sequence for a
// while, and are gone after -undo.
std::optional<std::size_t> unpatched(std::string_view file, std::string_view live, std::string_view seq) {
  for (std::size_t at = file.find(seq); at != std::string_view::npos; at = file.find(seq, at + 1))
    if (at + seq.size() <= live.size() && live.substr(at, seq.size()) == seq) return at;
  return std::nullopt;
}

}  // namespace

Result<SyscallSites> find_syscall_sites(pid_t pid) {
  SyscallSites sites;
  if (std::string why = refusal_from_status(pid, sites.seccomp); !why.empty()) return fail(why);
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  for (const auto& m : *maps) {
    std::string_view base = std::string_view(m.path).substr(m.path.rfind('/') + 1);
    if (!m.executable || !m.file_backed() || !base.starts_with("libc.so")) continue;
    auto bytes = read_target(pid, m.start, m.end - m.start);
    if (!bytes) continue;
    // The very file mapped there, whatever its path names now.
    auto file = read_file_range(fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end), m.offset,
                                m.end - m.start);
    if (!file) continue;
    std::string_view live(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    // Executing from the sequence's first byte runs exactly these
    // instructions, wherever the original code's own boundaries lie.
    if (auto at = unpatched(*file, live, kSyscallRet); !sites.syscall_ret && at) sites.syscall_ret = m.start + *at;
    if (auto at = unpatched(*file, live, kSigreturn); !sites.sigreturn && at) sites.sigreturn = m.start + *at;
  }
  if (!sites.syscall_ret || !sites.sigreturn)
    return fail("no `syscall; ret` and rt_sigreturn sequence in the target's libc (statically linked?)");
  return sites;
}

Result<ArmedCall> capture_thread(const WorldStop& world, pid_t tid) {
  auto held = world.threads().find(tid);
  if (held == world.threads().end() || !held->second.stopped) return fail(fmt::format("thread {} is not held", tid));
  if (held->second.group_stop) return fail(fmt::format("thread {} is in a job-control stop", tid));
  // A thread stopped to receive a signal: running a call in it would turn
  // that signal into one re-sent at detach, without its siginfo.
  if (held->second.pending_signal) return fail(fmt::format("thread {} has a signal to take", tid));
  ArmedCall armed;
  armed.tid = tid;
  if (::ptrace(PTRACE_GETREGS, tid, nullptr, &armed.saved) != 0)
    return fail(sys_error(fmt::format("PTRACE_GETREGS of thread {}", tid)));
  // In a system call where no call may run (syscall_stop.h: a restart
  // through restart_block, a clone at its event stop, a temporary mask).
  if (std::string why = why_no_call_in_syscall(tid, armed.saved); !why.empty())
    return fail(fmt::format("thread {}: {}", tid, why));
  if (::ptrace(PTRACE_GETSIGMASK, tid, sizeof armed.saved_mask, &armed.saved_mask) != 0)
    return fail(sys_error(fmt::format("PTRACE_GETSIGMASK of thread {}", tid)));
  return armed;
}

Result<FramePlan> plan_restore_frame(const WorldStop& world, const ArmedCall& armed, uint64_t headroom) {
  pid_t tid = armed.tid;
  auto xstate = read_xstate(tid);
  if (!xstate) return std::unexpected(xstate.error());
  static const XsaveLayout layout = host_xsave_layout();
  auto area = sigframe_xstate(layout, *xstate);
  if (!area) return fail(fmt::format("thread {}: {}", tid, area.error().message()));
  auto maps = profiler::read_maps(world.pid());
  if (!maps) return std::unexpected(maps.error());
  std::vector<uint64_t> thread_pointers;
  for (const auto& [other, t] : world.threads()) thread_pointers.push_back(t.regs.fs_base);
  auto place = place_frame_below(*maps, world.pid(), tid, armed.saved.rsp, armed.saved.fs_base,
                                 kXstateOffset + area->size(), thread_pointers);
  if (!place) return std::unexpected(place.error());
  if (place->addr - place->stack.start < headroom)
    return fail(fmt::format("thread {}: less than {} KiB of stack below its frame", tid, headroom >> 10));
  return FramePlan{std::move(*area), *place};
}

Result<uint64_t> write_restore_frame(const WorldStop& world, const ArmedCall& armed, uint64_t return_to,
                                     FrameAlignment alignment) {
  // A called function runs below the frame: it needs stack of its own.
  uint64_t headroom = alignment == FrameAlignment::FunctionEntry ? kCallHeadroom : 0;
  auto plan = plan_restore_frame(world, armed, headroom);
  if (!plan) return std::unexpected(plan.error());
  // A function is entered with rsp = 8 (mod 16): its frame starts 8 bytes
  // into a 64-byte aligned block, and its XSAVE area at that block + 448.
  uint64_t frame_addr = plan->place.addr + (alignment == FrameAlignment::FunctionEntry ? 8 : 0);
  auto frame = build_sigframe(frame_addr, return_to, after_restart_rule(armed.saved), armed.saved_mask, plan->xstate);
  if (!frame) return std::unexpected(frame.error());
  if (auto r = write_in_mapping(world.pid(), plan->place.stack, frame_addr, *frame); !r) return std::unexpected(r.error());
  return frame_addr;
}

Status can_take_call(const WorldStop& world, pid_t tid, FrameAlignment alignment) {
  auto armed = capture_thread(world, tid);
  if (!armed) return std::unexpected(armed.error());
  uint64_t headroom = alignment == FrameAlignment::FunctionEntry ? kCallHeadroom : 0;
  if (auto plan = plan_restore_frame(world, *armed, headroom); !plan) return std::unexpected(plan.error());
  return ok();
}

// The sites were found before this window; an exec since (same pid, same
// start time) maps libc elsewhere. Checked with the world held, so it holds
// for the call.
Status sites_still_there(pid_t pid, const SyscallSites& sites) {
  for (auto [addr, bytes] : {std::pair{sites.syscall_ret, kSyscallRet}, std::pair{sites.sigreturn, kSigreturn}}) {
    auto live = read_target(pid, addr, bytes.size());
    if (!live || std::string_view(reinterpret_cast<const char*>(live->data()), live->size()) != bytes)
      return fail(fmt::format("the syscall sequence at {:#x} is gone from process {} (exec?)", addr, pid));
  }
  return ok();
}

SeccompCall injected_call(const SyscallSites& sites, long nr, const std::array<uint64_t, 6>& args) {
  return SeccompCall{nr, args, sites.syscall_ret + 2};  // the kernel reports the address after `syscall`
}

namespace {

// The chain's way back should dynid die with it armed: the filters see it
// too, with the argument registers as the call left them (a `syscall` keeps
// them all).
SeccompCall chain_sigreturn(const SyscallSites& sites, const std::array<uint64_t, 6>& args) {
  return SeccompCall{SYS_rt_sigreturn, args, sites.sigreturn + kSigreturn.size()};
}

// Whether the process runs under seccomp now, from its main thread (filters
// are installed for the whole process, or before its threads start).
bool main_thread_filtered(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid), 1 << 16);
  return !status || seccomp_mode(*status) != '0';  // unknown: check
}

}  // namespace

Status seccomp_allows_all(const WorldStop& world, const SyscallSites& sites, std::vector<SeccompCall> calls) {
  // `sites.seccomp` is from before the window: a filter since then counts too.
  if (!sites.seccomp && !main_thread_filtered(world.pid())) return ok();
  for (std::size_t i = 0, n = calls.size(); i < n; ++i) {
    if (calls[i].nr == SYS_rt_sigreturn) continue;  // a remote call's stub: its own address
    calls[i].ip = sites.syscall_ret + 2;
    calls.push_back(chain_sigreturn(sites, calls[i].args));
  }
  for (const auto& [tid, thread] : world.threads())
    if (auto r = seccomp_lets_through(world.pid(), tid, calls); !r) return r;
  return ok();
}

Result<ArmedCall> arm_syscall(const WorldStop& world, pid_t tid, const SyscallSites& sites, long nr,
                              const std::array<uint64_t, 6>& args) {
  if (auto r = sites_still_there(world.pid(), sites); !r) return std::unexpected(r.error());
  // Every call, whatever `sites.seccomp` said: a thread may have installed a
  // filter since (one status read for a thread without one).
  const SeccompCall calls[] = {injected_call(sites, nr, args), chain_sigreturn(sites, args)};
  if (auto r = seccomp_lets_through(world.pid(), tid, calls); !r) return std::unexpected(r.error());
  auto armed = capture_thread(world, tid);
  if (!armed) return std::unexpected(armed.error());
  // Step 1: the frame, below the red zone, inside the thread's own stack.
  auto frame_addr = write_restore_frame(world, *armed, sites.sigreturn, FrameAlignment::Syscall);
  if (!frame_addr) return std::unexpected(frame_addr.error());
  // Step 2: registers first, then the mask. A dynid dying between the two
  // leaves a chain whose sigreturn restores the mask anyway.
  user_regs_struct call = armed->saved;
  call.rip = sites.syscall_ret;
  call.rsp = *frame_addr;
  call.rax = static_cast<unsigned long long>(nr);
  call.orig_rax = static_cast<unsigned long long>(-1);  // no restart of the interrupted call here
  call.rdi = args[0], call.rsi = args[1], call.rdx = args[2], call.r10 = args[3], call.r8 = args[4], call.r9 = args[5];
  if (auto r = set_regs(tid, call); !r) return std::unexpected(r.error());
  if (auto r = set_mask(tid, ~uint64_t{0}); !r) return std::unexpected(r.error());
  return armed;
}

Result<long> remote_syscall(WorldStop& world, pid_t tid, const SyscallSites& sites, long nr,
                            const std::array<uint64_t, 6>& args) {
  auto armed = arm_syscall(world, tid, sites, nr, args);
  if (!armed) return std::unexpected(armed.error());
  // Step 3: run to the call's syscall-exit stop with PTRACE_SYSCALL, never a
  // single step: a thread single-stepped keeps the trap flag when its tracer
  // dies and is killed by SIGTRAP at its next instruction, while the kernel
  // clears syscall tracing at the tracer's death. With every blockable signal
  // blocked the stops are the call's entry and exit; SIGSTOP cannot be
  // blocked and is handed back at detach.
  user_regs_struct after{};
  int syscall_stops = 0;
  for (int stops = 0; syscall_stops < 2; ++stops) {
    if (stops == 16) return fail(fmt::format("thread {} did not run its remote call", tid));
    if (::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) != 0)
      return fail(sys_error(fmt::format("PTRACE_SYSCALL of thread {}", tid)));
    int status = 0;
    if (!wait_for_report(world.pid(), tid, status) || !WIFSTOPPED(status))
      return fail(fmt::format("thread {} ended during a remote call", tid));
    if (::ptrace(PTRACE_GETREGS, tid, nullptr, &after) != 0)
      return fail(sys_error(fmt::format("PTRACE_GETREGS of thread {}", tid)));
    bool at_call = after.rip == sites.syscall_ret + 2 && static_cast<long>(after.orig_rax) == nr;
    if (WSTOPSIG(status) == kSyscallStop && at_call)
      ++syscall_stops;
    else if (WSTOPSIG(status) != kSyscallStop && (status >> 16) == 0)
      world.defer_signal(tid, WSTOPSIG(status));  // a signal (an event stop carries none)
  }
  // Back as it was at its stop, interrupted call included: detaching (or the
  // tracer's death) wakes the thread with TIF_SIGPENDING, so on its way out
  // of this stop the kernel applies the restart rule (or delivers a signal
  // with the interrupted call's own SA_RESTART semantics).
  if (auto r = set_mask(tid, armed->saved_mask); !r) return std::unexpected(r.error());
  if (auto r = set_regs(tid, armed->saved); !r) return std::unexpected(r.error());
  return static_cast<long>(after.rax);
}

namespace {

// The first held thread that could take a call, or every thread's reason.
Result<pid_t> thread_for_a_call(const WorldStop& world) {
  std::string reasons;
  for (const auto& [tid, thread] : world.threads()) {
    if (auto fit = can_take_call(world, tid); fit) return tid;
    else if (reasons.size() < 400) reasons += "; " + fit.error().message();
  }
  return fail("no thread could run a remote call" + reasons);
}

}  // namespace

Status any_thread_can_take_call(const WorldStop& world) {
  auto tid = thread_for_a_call(world);
  return tid ? ok() : Status(std::unexpected(tid.error()));
}

Result<std::pair<pid_t, long>> syscall_in_any_thread(WorldStop& world, const SyscallSites& sites, long nr,
                                                     const std::array<uint64_t, 6>& args) {
  auto tid = thread_for_a_call(world);
  if (!tid) return std::unexpected(tid.error());
  auto r = remote_syscall(world, *tid, sites, nr, args);
  if (!r) return std::unexpected(r.error());
  return std::pair{*tid, *r};
}

}  // namespace dyni
