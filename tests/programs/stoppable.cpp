// A target for stop-the-world tests: it notices if a stop changed anything.
// usage: dyni-test-stoppable [spawner|seccomp|nothp|syscalls]
//  - the line "vfork" starts a thread that vforks a child sleeping 1.5 s;
//  - three workers recompute a known checksum forever; a wrong result prints
//    "WRONG checksum" and exits 1 (a register or flag clobbered by a stop would show);
//  - a sleeper loops in nanosleep (a blocking call that must restart);
//  - CPU state threads keep known values in every register a signal frame
//    carries (ymm/zmm, opmasks, MXCSR, x87, PKRU, AMX tiles; as far as the CPU
//    has them: tests/programs/cpu_state.h) and check them in a tight loop;
//    the line "checks" is answered with their names;
//  - "dyni-deep" parks with 1.5 KiB of stack left, "dyni-altstack" inside a
//    handler on an 8 KiB alternate signal stack, both with signals blocked
//    (threads whose stack cannot take a remote call's frame);
//  - a masked thread keeps SIGUSR2 blocked and checks its mask stays so;
//  - with "seccomp", every thread runs under a seccomp filter (one that allows
//    everything: what matters is that a filter is there);
//  - with "spawner", a thread creates and joins short-lived threads forever
//    (threads appear while the world is being stopped);
//  - with "syscalls", a thread makes getpid() calls in a tight loop and checks
//    each result, and another waits in epoll_wait() on an empty set, where
//    EINTR is the only answer allowed (threads met on their way out of a
//    system call that is not restarted), and a third waits in ppoll with a
//    temporary mask and checks its own is back after each return;
//  - with "nothp", it turns transparent huge pages off for itself first, as
//    mariadbd does (prctl(PR_SET_THP_DISABLE, 1)); the line "thp" is answered
//    "thp N" with PR_GET_THP_DISABLE's answer, and "lift" sets the flag to
//    "except advised" (Linux 6.18), as a dynid killed mid-window leaves it;
//  - SIGUSR1 and SIGRTMIN (which queues: each one sent arrives once) are counted;
//  - main prints "ready", then answers each line read from stdin (a blocking
//    read across stops) with "got LINE usr1=N rt=M", and exits 0 at end of input.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/auxv.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/programs/cpu_state.h"
#include "tests/programs/seccomp_programs.h"

namespace {

std::atomic<int> usr1{0}, rt{0};
std::atomic<uint64_t> rounds{0};  // a side effect per round: the loop must really run
volatile uint64_t seed = 1;       // read each round: the checksum must really be recomputed

[[noreturn]] void wrong(const char* what) {
  std::printf("WRONG %s\n", what);
  std::fflush(stdout);
  _exit(1);
}

uint64_t checksum() {
  uint64_t x = seed;
  for (int i = 0; i < 200000; ++i) x = x * 6364136223846793005ULL + static_cast<uint64_t>(i);
  return x;
}

[[noreturn]] void work(uint64_t expected) {
  for (;; rounds.fetch_add(1, std::memory_order_relaxed))
    if (checksum() != expected) wrong("checksum");
}

[[noreturn]] void sleep_forever() {
  for (;;) {
    timespec ts{0, 20'000'000};
    nanosleep(&ts, nullptr);
  }
}

// Blocks for ever in read() on a pipe nobody writes, every signal blocked
// (a signal frame here would overflow the stack: only dyni may be refused).
[[noreturn]] void block_for_ever() {
  int fds[2];
  if (::pipe(fds) != 0) wrong("pipe");
  char c;
  for (;;)
    if (::read(fds[0], &c, 1) >= 0) wrong("read");
}

void block_all_signals() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

// Parks with ~1.5 KiB of its 64 KiB stack left above the guard page.
[[noreturn]] void deep_on_stack() {
  pthread_setname_np(pthread_self(), "dyni-deep");
  block_all_signals();
  pthread_attr_t attr;
  void* low = nullptr;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0 || pthread_attr_getstack(&attr, &low, &size) != 0)
    wrong("stack bounds");
  auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  std::size_t fill = sp - reinterpret_cast<uintptr_t>(low) - 1536;
  volatile char* deep = static_cast<char*>(__builtin_alloca(fill));
  deep[0] = 1;
  block_for_ever();
}

// Parks inside a signal handler running on a small alternate stack: 8 KiB,
// or the kernel's minimum where that is more (AT_MINSIGSTKSZ: 11,952 bytes
// on an Intel Xeon with AMX, whose tile data a signal frame may hold;
// sigaltstack refuses a smaller one there).
[[noreturn]] void on_alternate_stack() {
  pthread_setname_np(pthread_self(), "dyni-altstack");
  const std::size_t kAltSize = (std::max<std::size_t>(8192, getauxval(AT_MINSIGSTKSZ) + 2048) + 4095) & ~std::size_t{4095};
  void* alt = mmap(nullptr, kAltSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (alt == MAP_FAILED) wrong("mmap");
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = kAltSize;
  if (sigaltstack(&ss, nullptr) != 0) wrong("sigaltstack");
  struct sigaction sa {};
  sa.sa_handler = [](int) { block_for_ever(); };
  sa.sa_flags = SA_ONSTACK;
  sigfillset(&sa.sa_mask);  // in the handler, every signal blocked
  sigaction(SIGRTMIN + 1, &sa, nullptr);
  block_all_signals();
  sigset_t trigger;
  sigemptyset(&trigger);
  sigaddset(&trigger, SIGRTMIN + 1);
  pthread_sigmask(SIG_UNBLOCK, &trigger, nullptr);
  pthread_kill(pthread_self(), SIGRTMIN + 1);
  wrong("alternate stack");  // the handler never returns
}

[[noreturn]] void masked() {
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, nullptr);
  for (;;) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (!sigismember(&now, SIGUSR2) || sigismember(&now, SIGUSR1)) wrong("mask");
    rounds.fetch_add(1, std::memory_order_relaxed);
  }
}

[[noreturn]] void getpid_forever() {
  const long pid = ::syscall(SYS_getpid);
  for (;; rounds.fetch_add(1, std::memory_order_relaxed))
    if (::syscall(SYS_getpid) != pid) wrong("getpid");
}

[[noreturn]] void epoll_forever() {
  int ep = ::epoll_create1(0);
  if (ep < 0) wrong("epoll_create1");
  for (;;) {
    epoll_event e{};
    if (::epoll_wait(ep, &e, 1, -1) != -1 || errno != EINTR) wrong("epoll_wait");
  }
}

// Waits in ppoll with a temporary mask that lets SIGWINCH in, which its own
// mask blocks (as a server waits in pselect for a signal it holds off
// elsewhere); after each return its own mask must be back.
[[noreturn]] void ppoll_forever() {
  sigset_t own;
  sigemptyset(&own);
  sigaddset(&own, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &own, nullptr);
  sigset_t during;
  pthread_sigmask(SIG_BLOCK, nullptr, &during);
  sigdelset(&during, SIGWINCH);
  for (;;) {
    timespec ts{0, 5'000'000};
    ::ppoll(nullptr, 0, &ts, &during);
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (!sigismember(&now, SIGWINCH)) wrong("ppoll's temporary mask stayed");
  }
}

[[noreturn]] void spawn_forever() {
  for (;;) std::thread([] { volatile int x = 0; for (int i = 0; i < 1000; ++i) x = x + i; }).join();
}

}  // namespace

// A filter that refuses madvise and mmap(PROT_WRITE | PROT_EXEC) with EPERM
// and allows the rest, installed before any thread starts.
void install_seccomp_filter() {
  std::vector<sock_filter> filter = dyni::test::no_madvise_no_wx_filter();
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    wrong("seccomp");
}

// A vfork parent waits for its child in a killable sleep that
// PTRACE_INTERRUPT does not end: the child sleeps 1.5 s, then exits.
static void vfork_parent() {
  pid_t child = vfork();
  if (child == 0) {
    struct timespec pause = {1, 500000000};
    syscall(SYS_nanosleep, &pause, nullptr);
    _exit(0);
  }
  waitpid(child, nullptr, 0);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "seccomp") == 0) install_seccomp_filter();
  if (argc > 1 && std::strcmp(argv[1], "nothp") == 0 && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) wrong("prctl");
  struct sigaction sa {};
  sa.sa_handler = [](int) { usr1.fetch_add(1); };
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = [](int) { rt.fetch_add(1); };
  sigaction(SIGRTMIN, &sa, nullptr);
  uint64_t expected = checksum();
  for (int i = 0; i < 3; ++i) std::thread(work, expected).detach();
  std::thread(sleep_forever).detach();
  std::string checks = dyni::test::start_cpu_state_checkers();
  std::thread(masked).detach();
  pthread_attr_t small;
  pthread_attr_init(&small);
  pthread_attr_setstacksize(&small, 64 << 10);
  pthread_t deep;
  pthread_create(&deep, &small, [](void*) -> void* { deep_on_stack(); }, nullptr);
  std::thread(on_alternate_stack).detach();
  if (argc > 1 && std::strcmp(argv[1], "spawner") == 0) std::thread(spawn_forever).detach();
  if (argc > 1 && std::strcmp(argv[1], "syscalls") == 0) {
    std::thread(getpid_forever).detach();
    std::thread(epoll_forever).detach();
    std::thread(ppoll_forever).detach();
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "checks") {
      std::printf("checks %s\n", checks.c_str());
      std::fflush(stdout);
      continue;
    }
    if (line == "thp" || line == "lift") {
      if (line == "lift") prctl(PR_SET_THP_DISABLE, 1, 1 << 1, 0, 0);
      std::printf("thp %d\n", prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
      std::fflush(stdout);
      continue;
    }
    if (line == "vfork") {  // a thread that no stop can reach for 1.5 s
      std::thread(vfork_parent).detach();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("got %s usr1=%d rt=%d\n", line.c_str(), usr1.load(), rt.load());
    std::fflush(stdout);
  }
  return 0;
}
