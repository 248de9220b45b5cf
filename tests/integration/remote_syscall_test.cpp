// Remote system calls in held threads (dynid/remote_syscall.h): the restart
// rule and the signal frame as data, then on a real target: mmap and munmap
// run in every thread leave each thread as it was, and a tracer killed with
// the call armed in every thread leaves the target running unchanged (each
// thread runs the call and rt_sigreturn by itself).
#include "dynid/remote_syscall.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cstring>

#include <fmt/format.h>

#include "common/file_io.h"
#include "dynid/target_memory.h"
#include "dynid/world_stop.h"
#include "profiler/process_maps.h"
#include "tests/integration/stoppable_target.h"
#include "tests/programs/seccomp_programs.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using test::tracer_of;
using namespace std::chrono_literals;

user_regs_struct in_call(long nr, long ret, uint64_t rip) {
  user_regs_struct r{};
  r.orig_rax = static_cast<unsigned long long>(nr);
  r.rax = static_cast<unsigned long long>(ret);
  r.rip = rip;
  return r;
}

TEST(RestartRule, AnInterruptedCallGoesBackToItsSyscallInstruction) {
  for (long code : {-512L, -513L, -514L}) {  // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
    user_regs_struct r = after_restart_rule(in_call(SYS_read, code, 0x1002));
    EXPECT_EQ(r.rip, 0x1000u);
    EXPECT_EQ(r.rax, static_cast<unsigned long long>(SYS_read));
    EXPECT_EQ(static_cast<long>(r.orig_rax), -1);
  }
}

TEST(RestartRule, AFinishedCallOrPlainCodeIsLeftAsItIs) {
  user_regs_struct done = after_restart_rule(in_call(SYS_read, 42, 0x1002));
  EXPECT_EQ(done.rip, 0x1002u);
  EXPECT_EQ(done.rax, 42u);
  EXPECT_EQ(static_cast<long>(after_restart_rule(in_call(SYS_read, -4, 0x1002)).rax), -4);  // EINTR stays
  user_regs_struct plain = after_restart_rule(in_call(-1, -512, 0x1002));  // not in a call: rax is data
  EXPECT_EQ(plain.rip, 0x1002u);
  EXPECT_EQ(static_cast<long>(plain.rax), -512);
}

// A signal frame's XSAVE area (dynid/xsave_frame.h makes real ones).
std::vector<uint8_t> fake_area(uint32_t size) {
  std::vector<uint8_t> x(size + 4, 0xab);
  return x;
}

TEST(Sigframe, HoldsReturnAddressRegistersMaskAndXstateArea) {
  user_regs_struct regs{};
  regs.rip = 0x401000, regs.rsp = 0x7ffd0000, regs.rax = 7, regs.r15 = 15, regs.cs = 0x33, regs.ss = 0x2b;
  auto frame = build_sigframe(0x7ffc0000, 0x7f0000001234, regs, 0x5555, fake_area(2440));
  ASSERT_TRUE(frame) << frame.error().message();
  auto u64 = [&](std::size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, frame->data() + at, 8);
    return v;
  };
  EXPECT_EQ(u64(0), 0x7f0000001234u);               // pretcode: rt_sigreturn's sequence
  EXPECT_EQ(u64(8), 0x7u);                           // uc_flags: FP_XSTATE | SIGCONTEXT_SS | STRICT_RESTORE_SS
  EXPECT_EQ(u64(8 + 40 + 7 * 8), 15u);              // mcontext.r15
  EXPECT_EQ(u64(8 + 40 + 13 * 8), 7u);              // mcontext.rax
  EXPECT_EQ(u64(8 + 40 + 15 * 8), 0x7ffd0000u);     // mcontext.rsp
  EXPECT_EQ(u64(8 + 40 + 16 * 8), 0x401000u);       // mcontext.rip
  EXPECT_EQ(u64(8 + 40 + 184), 0x7ffc0000u + 448);  // fpstate, 64-byte aligned
  EXPECT_EQ(u64(8 + 296), 0x5555u);                  // uc_sigmask
  EXPECT_EQ((*frame)[448 + 600], 0xab);             // the area itself, copied
  EXPECT_EQ(frame->size(), 448u + 2440 + 4);
}

TEST(Sigframe, RefusesWhatItCannotRestoreWhole) {
  user_regs_struct regs{};
  EXPECT_FALSE(build_sigframe(0x7ffc0000, 1, regs, 0, fake_area(500)));   // shorter than an XSAVE area
  EXPECT_FALSE(build_sigframe(0x7ffc0004, 1, regs, 0, fake_area(2440)));  // misaligned
  // A function's frame (rsp = 8 mod 16): its XSAVE area still 64-byte aligned.
  auto entry = build_sigframe(0x7ffc0008, 1, regs, 0, fake_area(2440));
  ASSERT_TRUE(entry);
  uint64_t fpstate = 0;
  std::memcpy(&fpstate, entry->data() + 8 + 40 + 184, 8);
  EXPECT_EQ(fpstate, 0x7ffc0008u + 440);
  EXPECT_EQ(entry->size(), 440u + 2440 + 4);
}

// Distinct addresses, one per thread, for MAP_FIXED_NOREPLACE mappings.
uint64_t slot(int i) { return 0x6d0000000000ULL + static_cast<uint64_t>(i) * 0x100000; }

bool mapped(pid_t pid, uint64_t addr) {
  auto maps = read_file(fmt::format("/proc/{}/maps", pid), 1 << 22);
  return maps && maps->find(fmt::format("{:x}-", addr)) != std::string::npos;
}

std::array<uint64_t, 6> mmap_args(uint64_t addr, int prot = PROT_READ) {
  return {addr, 4096, static_cast<uint64_t>(prot), MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, static_cast<uint64_t>(-1), 0};
}

using RemoteSyscallTest = test::PtraceTest;

// The thread named `comm` (pthread_setname_np) of `pid`, or 0.
pid_t thread_named(pid_t pid, const std::string& comm) {
  for (pid_t tid : list_numeric_entries(fmt::format("/proc/{}/task", pid))) {
    auto name = read_file(fmt::format("/proc/{}/task/{}/comm", pid, tid));
    if (name && *name == comm + "\n") return tid;
  }
  return 0;
}

// The two threads whose stacks cannot take a frame (see stoppable.cpp).
std::pair<pid_t, pid_t> cramped_threads(pid_t pid) {
  return {thread_named(pid, "dyni-deep"), thread_named(pid, "dyni-altstack")};
}

// The CPU state the target checks for itself, as it names it ("avx pkru x87 mxcsr").
std::string checked_state(StoppableTarget& target) {
  std::string checks = target.ask("checks");
  std::printf("the target checks: %s\n", checks.c_str());
  return checks;
}

TEST_F(RemoteSyscallTest, MmapAndMunmapInEveryThreadLeaveEachAsItWas) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::string checks = checked_state(target);
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_NE(checks.find(" x87 mxcsr"), std::string::npos) << checks;
  }
  std::this_thread::sleep_for(100ms);
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();
  auto [deep, alt] = cramped_threads(target.pid());
  ASSERT_TRUE(deep && alt);
  for (int round = 0; round < 10; ++round) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    int i = 0, ran = 0;
    for (const auto& [tid, t] : w->threads()) {
      uint64_t addr = slot(i++);
      auto r = remote_syscall(*w, tid, *sites, SYS_mmap, mmap_args(addr));
      if (tid == deep || tid == alt) {  // no room for a frame on their stacks
        EXPECT_FALSE(r) << "thread " << tid << " ran a call its stack cannot hold";
        continue;
      }
      if (!r) {  // only a nanosleep restarting through restart_block is refused here
        EXPECT_NE(r.error().message().find("restart_block"), std::string::npos) << r.error().message();
        continue;
      }
      ++ran;
      EXPECT_EQ(static_cast<uint64_t>(*r), addr);
      EXPECT_TRUE(mapped(target.pid(), addr));
      auto u = remote_syscall(*w, tid, *sites, SYS_munmap, {addr, 4096, 0, 0, 0, 0});
      ASSERT_TRUE(u) << u.error().message();
      EXPECT_EQ(*u, 0);
      EXPECT_FALSE(mapped(target.pid(), addr));
    }
    EXPECT_GE(ran, 5);  // main (in read), three workers, the masked thread at least
    w->resume();
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(target.running()) << "the target exited: " << target.read_line(100ms);
  }
  // The read interrupted 20 times still reads; no thread saw a wrong value,
  // register of any kind or signal mask (it would have printed WRONG and exited).
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// A `syscall; ret` whose live bytes are no longer the file's (bytes dyni
// patched into libc, gone after -undo) is never taken: the next one that
// still is the file's is.
TEST_F(RemoteSyscallTest, SitesAreOnlyWhereTheLiveBytesAreTheFiles) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  auto first = find_syscall_sites(target.pid());
  ASSERT_TRUE(first) << first.error().message();
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps);
  const profiler::Mapping* code = nullptr;
  for (const profiler::Mapping& m : *maps)
    if (m.executable && m.start <= first->syscall_ret && first->syscall_ret < m.end) code = &m;
  ASSERT_NE(code, nullptr);
  auto w = WorldStop::stop(target.pid(), 1000ms);  // no thread runs libc while its bytes differ
  ASSERT_TRUE(w) << w.error().message();
  const std::vector<uint8_t> traps(3, 0xcc), original{0x0f, 0x05, 0xc3};
  ASSERT_TRUE(write_in_mapping(target.pid(), *code, first->syscall_ret, traps));
  auto again = find_syscall_sites(target.pid());
  ASSERT_TRUE(write_in_mapping(target.pid(), *code, first->syscall_ret, original));
  w->resume();
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_GT(again->syscall_ret, first->syscall_ret);
  auto live = read_target(target.pid(), again->syscall_ret, 3);
  ASSERT_TRUE(live);
  EXPECT_EQ(*live, original);
  EXPECT_EQ(again->sigreturn, first->sigreturn);
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// A thread 1.5 KiB above its guard page, and one in a handler on an 8 KiB
// alternate stack: the frame would land in the guard page or outside the
// thread's stack, so the call is refused with the reason and nothing written.
TEST_F(RemoteSyscallTest, RefusesThreadsWhoseStackCannotHoldTheFrame) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();
  auto [deep, alt] = cramped_threads(target.pid());
  ASSERT_TRUE(deep && alt);
  auto w = WorldStop::stop(target.pid(), 1000ms);
  ASSERT_TRUE(w) << w.error().message();
  auto on_deep = arm_syscall(*w, deep, *sites, SYS_mmap, mmap_args(slot(0)));
  ASSERT_FALSE(on_deep);
  EXPECT_NE(on_deep.error().message().find("leave its stack"), std::string::npos) << on_deep.error().message();
  auto on_alt = arm_syscall(*w, alt, *sites, SYS_mmap, mmap_args(slot(1)));
  ASSERT_FALSE(on_alt);
  EXPECT_NE(on_alt.error().message().find("not on the thread's own stack"), std::string::npos)
      << on_alt.error().message();
  w->resume();
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(mapped(target.pid(), slot(0)));
  EXPECT_FALSE(mapped(target.pid(), slot(1)));
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// A target under a seccomp filter (refusing madvise and W+X mmaps with
// EPERM): dynid reads the filter back exactly as installed, runs what it
// allows, and refuses what it would not allow before anything is written;
// the target runs on untouched.
TEST_F(RemoteSyscallTest, RunsOnlyTheCallsATargetsSeccompFilterAllows) {
  StoppableTarget target("seccomp");
  ASSERT_EQ(target.read_line(), "ready");
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();
  EXPECT_TRUE(sites->seccomp);
  auto w = WorldStop::stop(target.pid(), 1000ms);
  ASSERT_TRUE(w) << w.error().message();
  auto filters = read_seccomp_filters(target.pid());
  ASSERT_TRUE(filters) << filters.error().message();
  const auto installed = test::no_madvise_no_wx_filter();
  ASSERT_EQ(filters->size(), 1u);
  ASSERT_EQ((*filters)[0].size(), installed.size());
  EXPECT_EQ(std::memcmp((*filters)[0].data(), installed.data(), installed.size() * sizeof(sock_filter)), 0);

  pid_t tid = target.pid();
  auto rx = remote_syscall(*w, tid, *sites, SYS_mmap, mmap_args(slot(0), PROT_READ | PROT_EXEC));
  ASSERT_TRUE(rx) << rx.error().message();
  EXPECT_EQ(static_cast<uint64_t>(*rx), slot(0));
  auto advise = remote_syscall(*w, tid, *sites, SYS_madvise, {slot(0), 4096, MADV_HUGEPAGE, 0, 0, 0});
  ASSERT_FALSE(advise);
  EXPECT_NE(advise.error().message().find("answers madvise(0x6d0000000000, 0x1000, 0xe"), std::string::npos)
      << advise.error().message();
  EXPECT_NE(advise.error().message().find("with ERRNO 1 (Operation not permitted)"), std::string::npos);
  auto wx = arm_syscall(*w, tid, *sites, SYS_mmap, mmap_args(slot(1), PROT_READ | PROT_WRITE | PROT_EXEC));
  ASSERT_FALSE(wx);
  EXPECT_NE(wx.error().message().find("answers mmap("), std::string::npos) << wx.error().message();
  EXPECT_TRUE(seccomp_allows_all(*w, *sites, {{SYS_mmap, mmap_args(slot(2), PROT_READ)}, {SYS_munmap, {slot(2), 4096}}}));
  auto all = seccomp_allows_all(*w, *sites, {{SYS_munmap, {slot(2), 4096}}, {SYS_madvise, {slot(2), 4096, 25}}});
  ASSERT_FALSE(all);
  EXPECT_NE(all.error().message().find("madvise"), std::string::npos) << all.error().message();
  auto unmapped = remote_syscall(*w, tid, *sites, SYS_munmap, {slot(0), 4096, 0, 0, 0, 0});
  ASSERT_TRUE(unmapped && *unmapped == 0);
  w->resume();
  EXPECT_FALSE(mapped(target.pid(), slot(1))) << "a refused call ran";
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// How far the tracer gets before it is SIGKILLed.
enum class KilledAt { Armed, AtTheCallsEntryStop, OnTheWayIntoTheCall };

// dynid SIGKILLed with the call armed (or already entered) in every thread:
// each thread runs the mmap, then rt_sigreturn restores it; the blocked read
// restarts; no thread is left single-stepping or traced.
void kill_tracer_mid_call(KilledAt when) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t tracer = ::fork();
  if (tracer == 0) {
    ::close(pipe_fds[0]);
    auto w = WorldStop::stop(target.pid(), 1000ms);
    if (!w) _exit(1);
    int i = 0;
    std::string armed;
    for (const auto& [tid, t] : w->threads()) {
      uint64_t addr = slot(i++);
      if (!arm_syscall(*w, tid, *sites, SYS_mmap, mmap_args(addr))) continue;
      if (when == KilledAt::AtTheCallsEntryStop) {
        int status = 0;
        if (::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) != 0 || ::waitpid(tid, &status, __WALL) != tid) _exit(1);
      }
      if (when == KilledAt::OnTheWayIntoTheCall && ::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) != 0) _exit(1);
      armed += fmt::format("{:x}\n", addr);
    }
    if (::write(pipe_fds[1], armed.data(), armed.size()) < 0) _exit(1);
    ::raise(SIGKILL);  // every thread holds the chain in its registers
  }
  ::close(pipe_fds[1]);
  std::string armed;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) armed.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(tracer, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the tracer did not reach its kill";
  int armed_threads = 0;
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(target.running()) << "the target exited: " << target.read_line(100ms);
  for (std::size_t at = 0, eol; (eol = armed.find('\n', at)) != std::string::npos; at = eol + 1) {
    ++armed_threads;
    uint64_t addr = std::stoull(armed.substr(at, eol - at), nullptr, 16);
    EXPECT_TRUE(mapped(target.pid(), addr)) << "a thread did not run its armed call at " << std::hex << addr;
  }
  EXPECT_GE(armed_threads, 5);
  EXPECT_EQ(tracer_of(target.pid()), 0);
  std::this_thread::sleep_for(300ms);  // the checkers run on restored state
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

TEST_F(RemoteSyscallTest, ATracerKilledWithTheCallArmedLeavesEveryThreadAsItWas) {
  kill_tracer_mid_call(KilledAt::Armed);
}

// Killed while the threads sit in the call's syscall-entry stop (how
// remote_syscall runs it): syscall tracing ends with the tracer, nothing
// traps afterwards. (With a single step instead, each thread would die of
// SIGTRAP: the trap flag outlives the tracer.)
TEST_F(RemoteSyscallTest, ATracerKilledInsideTheCallLeavesEveryThreadAsItWas) {
  kill_tracer_mid_call(KilledAt::AtTheCallsEntryStop);
}

// Killed right after resuming the threads with PTRACE_SYSCALL, while they
// run into the call's syscall-entry stop: the kernel, finding the tracer
// gone, sends each the stop's code as a signal. Without
// PTRACE_O_TRACESYSGOOD that is SIGTRAP and the target dies (found by
// tests/live/dynid_killed); with it, 0x85, which is no signal.
TEST_F(RemoteSyscallTest, ATracerKilledAsTheThreadsRunIntoTheCallLeavesThemAsTheyWere) {
  for (int round = 0; round < 3; ++round) kill_tracer_mid_call(KilledAt::OnTheWayIntoTheCall);
}

}  // namespace
}  // namespace dyni
