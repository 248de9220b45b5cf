// Functions of a real target run in one of its threads (dynid/remote_call.h),
// in a thread clean_for_calls() accepts (dynid/clean_thread.h): malloc and
// free in the target return and leave every thread as it was; a tracer
// SIGKILLed with the call under way leaves the target running unchanged.
#include "dynid/remote_call.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "dynid/cache_mapping.h"
#include "dynid/clean_thread.h"
#include "dynid/thread_unwind.h"
#include "profiler/process_maps.h"
#include "profiler/symbolizer.h"
#include "tests/integration/stoppable_target.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using namespace std::chrono_literals;

TEST(CleanThread, NamesTheCodeThatHoldsCallLocks) {
  // glibc's own names for its allocator (calloc is a weak alias of __libc_calloc).
  for (const char* name : {"malloc", "free", "realloc", "_Unwind_Find_FDE", "__register_frame_info", "_dl_open",
                           "dl_iterate_phdr", "fork", "__libc_calloc", "__libc_memalign", "_int_malloc", "_int_free",
                           // libc6-dbg's names: versions, glibc's internal aliases, GCC's clones, inner helpers
                           "cfree@GLIBC_2.2.5", "__GI___dl_iterate_phdr", "__posix_memalign", "__malloc_trim",
                           "__GI___libc_mallinfo2", "_mid_memalign.constprop.0", "tcache_init.part.0", "reused_arena",
                           "sysmalloc", "_int_realloc.isra.0"})
    EXPECT_TRUE(holds_call_locks(name)) << name;
  EXPECT_EQ(plain_symbol_name("__GI___dl_iterate_phdr"), "__dl_iterate_phdr");
  EXPECT_EQ(plain_symbol_name("cfree@GLIBC_2.2.5"), "cfree");
  EXPECT_EQ(plain_symbol_name("_mid_memalign.constprop.0"), "_mid_memalign");
  for (const char* name : {"read", "main", "_ZN5mysql6handleEv", "freeaddrinfo", "epoll_wait", "__libc_start_call_main",
                           "__libc_start_main", "__memmove_avx_unaligned_erms", "memcpy@@GLIBC_2.14", "qsort_r",
                           "__GI_memcpy", "_ZN4Item4freeEv"})
    EXPECT_FALSE(holds_call_locks(name)) << name;
  EXPECT_TRUE(module_holds_call_locks("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"));
  EXPECT_TRUE(module_holds_call_locks("/lib64/ld-linux-x86-64.so.2"));
  EXPECT_TRUE(module_holds_call_locks("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"));
  EXPECT_FALSE(module_holds_call_locks("/usr/sbin/mariadbd"));
}

// The run-time address of `name` in the target's module whose path contains
// `module`, from the module's own symbol tables (aliases included).
uint64_t function_in(const profiler::Symbolizer& symbols, const std::string& module, const std::string& name) {
  for (const profiler::Module& m : symbols.modules()) {
    if (m.path.find(module) == std::string::npos) continue;
    auto file = elf::ElfFile::open(m.path);
    auto names = file ? file->function_symbols() : fail("unreadable");
    if (!names) continue;
    for (const elf::Symbol& f : *names)
      if (f.name == name) return f.addr + m.bias;
  }
  return 0;
}

class RemoteCallTest : public test::PtraceTest {
 protected:
  RemoteCallTest() : RemoteCallTest(static_cast<const char*>(nullptr)) {}
  explicit RemoteCallTest(const char* mode) : target(mode) {}
  void SetUp() override {
    PtraceTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(target.read_line(), "ready");
    std::this_thread::sleep_for(100ms);
    auto s = profiler::Symbolizer::for_process(target.pid());
    ASSERT_TRUE(s) << s.error().message();
    symbols = std::make_unique<profiler::Symbolizer>(std::move(*s));
    executable = std::filesystem::read_symlink("/proc/" + std::to_string(target.pid()) + "/exe").string();
    auto sites = find_syscall_sites(target.pid());
    ASSERT_TRUE(sites) << sites.error().message();
    syscalls = *sites;
    // dyni's own r-x memory in the target holds the return stub.
    auto maps = profiler::read_maps(target.pid());
    ASSERT_TRUE(maps);
    uint64_t exe_lo = UINT64_MAX, exe_hi = 0;
    for (const auto& m : *maps)
      if (m.path.find("dyni-test-stoppable") != std::string::npos) exe_lo = std::min(exe_lo, m.start), exe_hi = std::max(exe_hi, m.end);
    auto place = place_cache(*maps, {exe_lo, exe_hi, 4096, 0});
    ASSERT_TRUE(place) << place.error().message();
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    auto c = map_cache(*w, syscalls, *place);
    ASSERT_TRUE(c) << c.error().message();
    cache = *c;
    w->resume();
    ASSERT_TRUE(write_cache(target.pid(), cache, kReturnStub));
  }

  // A held thread clean_for_calls accepts (the main thread, parked in read).
  pid_t clean_thread(const WorldStop& w) {
    StackReader reader(target.pid());
    for (const auto& [tid, t] : w.threads()) {
      auto stack = reader.unwind(tid);
      if (stack && clean_for_calls(tid, t, *stack, *symbols, executable)) return tid;
    }
    return 0;
  }

  StoppableTarget target;
  std::unique_ptr<profiler::Symbolizer> symbols;
  std::string executable;  // as the symbolizer names it
  SyscallSites syscalls;
  MappedCache cache;
};

TEST_F(RemoteCallTest, MallocAndFreeRunInACleanThreadAndLeaveItAsItWas) {
  uint64_t malloc_fn = function_in(*symbols, "libc.so", "malloc"), free_fn = function_in(*symbols, "libc.so", "free");
  ASSERT_TRUE(malloc_fn && free_fn);
  int busy_callers = 0;
  for (int round = 0; round < 5; ++round) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    pid_t tid = clean_thread(*w);
    ASSERT_NE(tid, 0) << "no thread parked cleanly";
    auto p = remote_call(*w, tid, {malloc_fn, {4096}, cache.addr}, 2000ms);
    ASSERT_TRUE(p) << p.error().message();
    EXPECT_NE(*p, 0u);
    auto f = remote_call(*w, tid, {free_fn, {*p}, cache.addr}, 2000ms);
    ASSERT_TRUE(f) << f.error().message();
    w->resume();
    // A worker stopped in its own code (not in a system call) takes calls
    // too when its stack is clean, as a signal handler would run there; its
    // own checks of its results must see nothing. (A call releases the other
    // threads: one caller per window.)
    auto w2 = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w2) << w2.error().message();
    StackReader reader(target.pid());
    for (const auto& [other, t] : w2->threads()) {
      auto stack = reader.unwind(other);
      if (static_cast<long>(t.regs.orig_rax) >= 0 || !stack || !clean_for_calls(other, t, *stack, *symbols, executable))
        continue;
      auto q = remote_call(*w2, other, {malloc_fn, {4096}, cache.addr}, 2000ms);
      ASSERT_TRUE(q) << q.error().message();
      auto g = remote_call(*w2, other, {free_fn, {*q}, cache.addr}, 2000ms);
      ASSERT_TRUE(g) << g.error().message();
      ++busy_callers;
      break;
    }
    w2->resume();
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(target.running()) << target.read_line(100ms);
  }
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");  // the read interrupted 10 times still reads
  EXPECT_EQ(target.finish(), 0);
  std::printf("calls ran in %d busy workers stopped in their own code\n", busy_callers);
  EXPECT_GE(busy_callers, 1);
}

// Threads met on their way out of a system call that has returned (getpid,
// an epoll_wait the stop ended with EINTR) take calls: the thread goes on
// with the call's result as it was; the sleeper in nanosleep (restarted
// through restart_block) is refused.
class RemoteCallAfterSyscallTest : public RemoteCallTest {
 protected:
  RemoteCallAfterSyscallTest() : RemoteCallTest("syscalls") {}
};

TEST_F(RemoteCallAfterSyscallTest, ThreadsAtTheExitOfACompletedCallTakeCallsAndSeeTheirResults) {
  uint64_t malloc_fn = function_in(*symbols, "libc.so", "malloc"), free_fn = function_in(*symbols, "libc.so", "free");
  ASSERT_TRUE(malloc_fn && free_fn);
  std::map<long, int> calls_after;  // system call number -> calls run at its exit
  int sleepers_refused = 0;
  for (int round = 0; round < 300 && (calls_after[SYS_getpid] < 3 || calls_after[SYS_epoll_wait] < 1); ++round) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    StackReader reader(target.pid());
    for (const auto& [tid, t] : w->threads()) {
      const long nr = static_cast<long>(t.regs.orig_rax);
      if (nr < 0 || in_restartable_call(t.regs)) continue;
      auto stack = reader.unwind(tid);
      ASSERT_TRUE(stack) << stack.error().message();
      Status clean = clean_for_calls(tid, t, *stack, *symbols, executable);
      if (static_cast<long>(t.regs.rax) == -516) {  // ERESTART_RESTARTBLOCK
        ASSERT_FALSE(clean) << "a thread in system call " << nr << " restarting through restart_block took a call";
        EXPECT_NE(clean.error().message().find("restart_block"), std::string::npos) << clean.error().message();
        ++sleepers_refused;
        continue;
      }
      if (!clean || (nr != SYS_getpid && nr != SYS_epoll_wait)) continue;
      auto p = remote_call(*w, tid, {malloc_fn, {4096}, cache.addr}, 2000ms);
      ASSERT_TRUE(p) << p.error().message();
      auto f = remote_call(*w, tid, {free_fn, {*p}, cache.addr}, 2000ms);
      ASSERT_TRUE(f) << f.error().message();
      ++calls_after[nr];
      break;  // a call releases the other threads: one caller per window
    }
    w->resume();
    ASSERT_TRUE(target.running()) << target.read_line(100ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 7));
  }
  std::printf("calls at the exit of getpid: %d, of epoll_wait: %d; sleepers refused: %d\n", calls_after[SYS_getpid],
              calls_after[SYS_epoll_wait], sleepers_refused);
  EXPECT_GE(calls_after[SYS_getpid], 3);
  EXPECT_GE(calls_after[SYS_epoll_wait], 1);
  EXPECT_GE(sleepers_refused, 1);
  std::this_thread::sleep_for(50ms);  // the checking threads see their results after the calls
  ASSERT_TRUE(target.running()) << target.read_line(100ms);
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// What a thread's rip follows: a `syscall`, an `int 0x80`.
const uint8_t kSyscall[] = {0x0f, 0x05, 0x90}, kInt80[] = {0xcd, 0x80, 0x90};

// A thread in ppoll with a temporary mask takes no call, not even a system
// call: the mask it would be left with is the temporary one.
TEST_F(RemoteCallAfterSyscallTest, AThreadWaitingWithATemporaryMaskTakesNoCall) {
  int met = 0;
  for (int round = 0; round < 300 && met < 3; ++round) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    for (const auto& [tid, t] : w->threads()) {
      if (static_cast<long>(t.regs.orig_rax) != SYS_ppoll) continue;
      Status fit = can_take_call(*w, tid);
      ASSERT_FALSE(fit) << "a thread in ppoll with a mask could take a call";
      auto r = remote_syscall(*w, tid, syscalls, SYS_getpid, {});
      ASSERT_FALSE(r) << "getpid ran in a thread in ppoll with a mask";
      // Met between a return the kernel set up to restart and the restart
      // itself: refused too, for that reason, and not in its call.
      if (fit.error().message().find("about to restart system call") != std::string::npos) continue;
      EXPECT_NE(fit.error().message().find("temporary signal mask"), std::string::npos) << fit.error().message();
      ++met;
    }
    w->resume();
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + round % 5));
  }
  EXPECT_GE(met, 3) << "the ppoll thread was never met in its call";
  std::this_thread::sleep_for(50ms);  // it checks its own mask after each return
  ASSERT_TRUE(target.running()) << target.read_line(100ms);
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

TEST(CleanThread, RefusesThreadsInSystemCallsWhereACallCannotRun) {
  // Told by the registers, the instruction before rip and the arguments a
  // mask is given in, before the stack is looked at; this process stands in
  // for the target.
  auto symbols = profiler::Symbolizer::for_process(::getpid());
  ASSERT_TRUE(symbols);
  ThreadStack stack;
  stack.complete = true;
  static const uint64_t kMask = 1;
  static const uint64_t kSigsetArg[2] = {reinterpret_cast<uint64_t>(&kMask), 8}, kNoSigsetArg[2] = {0, 8};
  auto why = [&](long nr, long rax, user_regs_struct regs = {}, const uint8_t* insn = kSyscall) {
    StoppedThread t{};
    t.regs = regs;
    t.regs.orig_rax = static_cast<unsigned long long>(nr);
    t.regs.rax = static_cast<unsigned long long>(rax);
    t.regs.rip = reinterpret_cast<uint64_t>(insn + 2);
    Status s = clean_for_calls(::gettid(), t, stack, *symbols, "");
    return s ? std::string("accepted") : s.error().message();
  };
  auto with = [](unsigned long long user_regs_struct::*reg, const void* value) {
    user_regs_struct r{};
    r.*reg = reinterpret_cast<uint64_t>(value);
    return r;
  };
  const long kErestartnohand = -514, kErestartRestartblock = -516, kEintr = -EINTR;
  const std::string kMasked = "temporary signal mask";
  EXPECT_NE(why(SYS_ppoll, kErestartnohand, with(&user_regs_struct::r10, &kMask)).find(kMasked), std::string::npos);
  EXPECT_NE(why(SYS_epoll_pwait, kEintr, with(&user_regs_struct::r8, &kMask)).find(kMasked), std::string::npos);
  EXPECT_NE(why(SYS_pselect6, kErestartnohand, with(&user_regs_struct::r9, kSigsetArg)).find(kMasked),
            std::string::npos);
  EXPECT_NE(why(SYS_rt_sigsuspend, kErestartnohand).find(kMasked), std::string::npos);
  EXPECT_EQ(why(SYS_pselect6, kErestartnohand), "accepted");  // glibc's select(): no mask
  EXPECT_EQ(why(SYS_pselect6, kErestartnohand, with(&user_regs_struct::r9, kNoSigsetArg)), "accepted");
  EXPECT_EQ(why(SYS_ppoll, kErestartnohand), "accepted");
  EXPECT_EQ(why(SYS_epoll_pwait, kEintr), "accepted");
  EXPECT_NE(why(SYS_clock_nanosleep, kErestartRestartblock).find("restart_block"), std::string::npos);
  EXPECT_NE(why(SYS_clone, 4242).find("fork, clone or exec"), std::string::npos);
  EXPECT_NE(why(SYS_execve, 0).find("fork, clone or exec"), std::string::npos);
  EXPECT_NE(why(SYS_read, -517).find("internal result"), std::string::npos);  // ERESTART_RESTARTBLOCK's neighbours
  EXPECT_NE(why(SYS_getpid, 4242, {}, kInt80).find("not made by a syscall instruction"), std::string::npos);
  {  // rip back on its `syscall`, rax its number again: to be restarted
    user_regs_struct at_syscall{};
    at_syscall.rip = reinterpret_cast<uint64_t>(kSyscall);
    at_syscall.rax = at_syscall.orig_rax = SYS_ppoll;
    StoppedThread t{};
    t.regs = at_syscall;
    Status s = clean_for_calls(::gettid(), t, stack, *symbols, "");
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message().find("about to restart system call"), std::string::npos) << s.error().message();
  }
  EXPECT_NE(why(SYS_getpid | 0x40000000, 4242).find("x32"), std::string::npos);
  EXPECT_NE(why(SYS_clone3, -ENOSYS).find("fork, clone or exec"), std::string::npos);  // at PTRACE_EVENT_CLONE
  EXPECT_NE(why(SYS_futex, -ENOSYS).find("in the middle of"), std::string::npos);
  EXPECT_NE(why(SYS_io_uring_enter, 0, with(&user_regs_struct::r10, reinterpret_cast<void*>(1 << 6))).find(kMasked),
            std::string::npos);  // IORING_ENTER_EXT_ARG_REG: a registered argument, unread
  EXPECT_EQ(why(SYS_io_uring_enter, 0), "accepted");
  // An allocator's own calls, at their exits: its lock may be held there.
  for (long memory : {SYS_mmap, SYS_munmap, SYS_mremap, SYS_madvise, SYS_mprotect, SYS_brk})
    EXPECT_NE(why(memory, 0).find("allocator"), std::string::npos) << memory;
  EXPECT_EQ(why(SYS_mmap, -512), "accepted");  // interrupted, to be restarted: nothing held
  EXPECT_EQ(why(SYS_getpid, 4242), "accepted");
  EXPECT_EQ(why(SYS_epoll_wait, kEintr), "accepted");
  EXPECT_EQ(why(SYS_read, -512), "accepted");  // ERESTARTSYS: restarted, as before
}

// The tracer dies with the call under way (at one of malloc's system calls,
// or before it ran at all): the thread finishes, returns into the stub,
// rt_sigreturn restores it.
TEST_F(RemoteCallTest, ATracerKilledDuringACallLeavesTheTargetAsItWas) {
  uint64_t malloc_fn = function_in(*symbols, "libc.so", "malloc");
  ASSERT_NE(malloc_fn, 0u);
  for (int stops : {0, 1, 2}) {
    pid_t tracer = ::fork();
    if (tracer == 0) {
      auto w = WorldStop::stop(target.pid(), 1000ms);
      pid_t tid = w ? clean_thread(*w) : 0;
      if (!tid) _exit(1);
      auto armed = capture_thread(*w, tid);
      auto frame = armed ? write_restore_frame(*w, *armed, cache.addr, FrameAlignment::FunctionEntry) : fail("");
      if (!frame) _exit(2);
      user_regs_struct regs = armed->saved;
      regs.rip = malloc_fn, regs.rsp = *frame, regs.rdi = 1 << 20, regs.orig_rax = static_cast<unsigned long long>(-1);
      uint64_t all = ~uint64_t{0};
      if (::ptrace(PTRACE_SETREGS, tid, nullptr, &regs) || ::ptrace(PTRACE_SETSIGMASK, tid, 8, &all)) _exit(3);
      w->release_all_but(tid);
      for (int i = 0; i < stops; ++i) {  // a 1 MiB malloc makes an mmap: stop at its entry, then exit
        int status;
        if (::ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr) || ::waitpid(tid, &status, __WALL) != tid) _exit(4);
      }
      ::raise(SIGKILL);
    }
    int status = 0;
    ::waitpid(tracer, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "tracer exit " << WEXITSTATUS(status);
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(target.running()) << "the target exited: " << target.read_line(100ms);
    EXPECT_EQ(test::tracer_of(target.pid()), 0);
    EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0") << "after " << stops << " stops";
  }
  EXPECT_EQ(target.finish(), 0);
}

// An executable that defines malloc (a statically linked allocator): a
// thread stopped in its code may be halfway through that malloc, which the
// call's own malloc would enter again. It is never clean, whatever its stack.
TEST(CleanThread, AThreadStoppedInAnExecutableThatDefinesMallocTakesNoCall) {
  StoppableTarget target(DYNI_TEST_OWN_MALLOC, nullptr);
  ASSERT_EQ(target.read_line(), "ready");
  auto symbols = profiler::Symbolizer::for_process(target.pid());
  ASSERT_TRUE(symbols) << symbols.error().message();
  const std::string executable = std::filesystem::canonical(DYNI_TEST_OWN_MALLOC).string();
  int refused = 0;
  for (int round = 0; round < 200 && refused < 3; ++round) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    StackReader reader(target.pid());
    for (const auto& [tid, t] : w->threads()) {
      if (static_cast<long>(t.regs.orig_rax) >= 0) continue;  // parked: another rule
      profiler::Location at = symbols->locate(t.regs.rip);
      if (at.module < 0 || symbols->modules()[static_cast<std::size_t>(at.module)].path != executable) continue;
      auto stack = reader.unwind(tid);
      if (!stack || !stack->complete) continue;
      Status clean = clean_for_calls(tid, t, *stack, *symbols, executable);
      ASSERT_FALSE(clean) << "a thread stopped in an executable that defines malloc may take a call";
      EXPECT_NE(clean.error().message().find("which defines malloc"), std::string::npos) << clean.error().message();
      ++refused;
    }
    w->resume();
  }
  EXPECT_GE(refused, 3) << "the worker was never stopped in its own code";
  EXPECT_EQ(target.finish(), 0);
}

}  // namespace
}  // namespace dyni
