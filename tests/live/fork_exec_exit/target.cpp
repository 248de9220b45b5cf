// fork, exec and exit around injection. Every round forks three children
// that compute part of it and hand their results back through a pipe, so
// forks happen all through profiling and injection; a worker thread runs the
// same hot code all along. A tenth of the time goes to libc's memcpy and
// memcmp, so that libc is optimized too (all_hot_modules) and a fork
// carries both modules' caches. SIGUSR2 asks, at the next round:
//  - mode fork: for a long-lived child, which carries on printing rounds
//    (its pid is written to PIDFILE);
//  - mode exec: for an exec of this program, which carries on printing rounds.
// In mode fork it first turns transparent huge pages off for itself, as
// mariadbd does (prctl(PR_SET_THP_DISABLE, 1)); its children inherit that.
// usage: target ROUNDS fork PIDFILE | target ROUNDS exec | target ROUNDS plain
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

namespace {

volatile sig_atomic_t asked = 0;

[[gnu::noinline]] uint64_t fe_step(uint64_t x, int i) {
  return (x ^ (x >> 23)) * 0x2127599BF4325C37ULL + static_cast<uint64_t>(i);
}

// Copies and compares a buffer through libc (lengths vary with x, so the
// compiler calls memcpy and memcmp): 1 when they agree.
[[gnu::noinline]] uint64_t fe_copy(uint64_t x) {
  static thread_local std::string a(1 << 18, 'a'), b(1 << 18, 'b');
  uint64_t same = 1;
  for (int i = 0; i < 60; ++i) {
    const std::size_t n = (1 << 18) - (x + static_cast<uint64_t>(i)) % 4096;
    a[n / 2] = static_cast<char>(x + static_cast<uint64_t>(i));
    std::memcpy(b.data(), a.data(), n);
    same &= std::memcmp(a.data(), b.data(), n) == 0;
  }
  return same;
}

[[gnu::noinline]] uint64_t fe_work(uint64_t x) {
  for (int i = 0; i < 6000000; ++i) x = fe_step(x, i);
  return x * fe_copy(x);  // 0 when a copy went wrong
}

// Three children compute a part each; the parent computes one too.
[[gnu::noinline]] uint64_t fe_round() {
  uint64_t sum = fe_work(100);
  for (int c = 0; c < 3; ++c) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    pid_t child = fork();
    if (child == 0) {
      uint64_t r = fe_work(static_cast<uint64_t>(c));
      _exit(write(fds[1], &r, sizeof r) == sizeof r ? 0 : 1);
    }
    close(fds[1]);
    uint64_t r = 0;
    if (child < 0 || read(fds[0], &r, sizeof r) != sizeof r) r = 0;
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) r = 0;
    sum = sum * 31 + r;
  }
  return sum;
}

void on_usr2(int) { asked = 1; }

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[2] : "plain";
  signal(SIGUSR2, on_usr2);
  if (mode == "fork" && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) return 5;
  std::thread([] {
    const uint64_t expected = fe_work(7);
    for (;;)
      if (fe_work(7) != expected) {
        std::printf("WRONG in the worker\n");
        std::fflush(stdout);
        std::_Exit(3);
      }
  }).detach();
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [&] {
    if (asked && mode == "exec") {
      char* args[] = {argv[0], const_cast<char*>("0"), const_cast<char*>("exec"), nullptr};
      execv("/proc/self/exe", args);
      std::_Exit(4);
    }
    if (asked && mode == "fork" && argc > 3) {
      asked = 0;
      pid_t child = fork();
      if (child > 0) std::ofstream(argv[3]) << child << "\n";
      // The child carries on here, without the worker thread: its rounds
      // print the same lines.
    }
    return std::to_string(fe_round());
  });
}
