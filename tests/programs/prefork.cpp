// A pre-forking server (issue 21): an idle parent keeps WORKERS worker
// processes, each busy BUSY percent of the time on known work, so that no
// worker alone may reach dynid's busy threshold while the pool does. A
// worker lives LIFETIME seconds (0: to the end; a fraction such as 0.2 is
// allowed) and is replaced by a new fork, as servers recycle workers.
// CHURNERS more workers, busy half as much, live LIFETIME seconds each (1 if
// 0) and are replaced as they end (CHURNERS may be N:BUSY:LIFETIME, to give
// them their own: 3:40:0.2 is postgres under pgbench -C, a backend per
// transaction),
// beside the WORKERS: short-lived workers born and dying while dynid
// injects the others and the parent.
//
// Every round of every worker is checked against the result the parent
// computed before its first fork: a wrong one (dyni's copies computing
// differently) prints WRONG and the worker exits 3; a worker killed by a
// signal or exiting non-zero makes the parent print FAILED and exit 3, after
// killing the rest; workers die with the parent. The parent prints "forks N" to stdout once a second.
// usage: dyni-test-prefork SECONDS WORKERS BUSY_PERCENT [LIFETIME=0 [CHURNERS=0[:BUSY[:LIFETIME]]]]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace {

using Clock = std::chrono::steady_clock;

template <int K>
__attribute__((noinline)) unsigned long pool_work(unsigned long x) {
  for (int i = 0; i < 3000 * (K + 1); ++i) x = (x ^ (x >> 7)) * 0x9E3779B97F4A7C15UL + K;
  return x;
}

// Copies and compares a buffer through libc (lengths vary with x, so the
// compiler calls memcpy and memcmp): libc holds a few percent of a worker's
// time, and a group's plan has a further module (issue 22). 1 when they agree.
__attribute__((noinline)) unsigned long pool_copy(unsigned long x) {
  static std::string a(1 << 16, 'a'), b(1 << 16, 'b');
  unsigned long same = 1;
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = (1 << 16) - (x + static_cast<unsigned long>(i)) % 4096;
    a[n / 2] = static_cast<char>(x + static_cast<unsigned long>(i));
    std::memcpy(b.data(), a.data(), n);
    same &= std::memcmp(a.data(), b.data(), n) == 0;
  }
  return same;
}

template <int... K>
unsigned long one_round(unsigned long x, std::integer_sequence<int, K...>) {
  ((x = pool_work<K>(x)), ...);
  return x * pool_copy(x);  // 0 when a copy went wrong
}

unsigned long round_from_one() { return one_round(1, std::make_integer_sequence<int, 12>{}); }

// Busy `busy_percent` of each 100 ms until `until`.
[[noreturn]] void work(Clock::time_point until, int busy_percent, unsigned long expected) {
  while (Clock::now() < until) {
    auto slice_end = Clock::now() + std::chrono::milliseconds(busy_percent);
    while (Clock::now() < slice_end) {
      unsigned long x = round_from_one();
      if (x != expected) {
        std::printf("WRONG round in worker %d: %lu, not %lu\n", ::getpid(), x, expected);
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 - busy_percent));
  }
  std::_Exit(0);
}

pid_t fork_worker(Clock::time_point until, int busy_percent, unsigned long expected) {
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that kills the parent ends the pool
    if (::getppid() != parent) std::_Exit(0);
    work(until, busy_percent, expected);
  }
  return pid;
}

[[noreturn]] void fail_all(const std::set<pid_t>& workers, const char* why, pid_t pid, int status) {
  std::printf("FAILED: worker %d %s %d\n", pid, why, status);
  std::fflush(stdout);
  for (pid_t w : workers) ::kill(w, SIGKILL);
  std::_Exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: dyni-test-prefork SECONDS WORKERS BUSY_PERCENT [LIFETIME [CHURNERS]]\n");
    return 2;
  }
  const auto end = Clock::now() + std::chrono::seconds(std::atoi(argv[1]));
  const int workers = std::atoi(argv[2]);
  const int busy = std::min(95, std::max(1, std::atoi(argv[3])));
  const auto lifetime = std::chrono::milliseconds(argc > 4 ? static_cast<long>(std::atof(argv[4]) * 1000) : 0);
  int churners = 0, churn_busy = std::max(1, busy / 2);
  double churn_seconds = lifetime.count() > 0 ? static_cast<double>(lifetime.count()) / 1000 : 1.0;
  if (argc > 5) std::sscanf(argv[5], "%d:%d:%lf", &churners, &churn_busy, &churn_seconds);
  churn_busy = std::min(95, std::max(1, churn_busy));
  const auto churn_life = std::chrono::milliseconds(static_cast<long>(churn_seconds * 1000));
  const unsigned long expected = round_from_one();
  auto worker_end = [&] { return lifetime.count() > 0 ? std::min(end, Clock::now() + lifetime) : end; };
  auto churner_end = [&] { return std::min(end, Clock::now() + churn_life); };
  std::set<pid_t> pool, churning;
  long forks = 0;
  for (int i = 0; i < workers; ++i, ++forks) pool.insert(fork_worker(worker_end(), busy, expected));
  for (int i = 0; i < churners; ++i, ++forks) {
    pid_t c = fork_worker(churner_end(), churn_busy, expected);
    pool.insert(c), churning.insert(c);
  }
  auto next_report = Clock::now();
  while (!pool.empty()) {
    int status = 0;
    pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      pool.erase(done);
      if (WIFSIGNALED(status)) fail_all(pool, "killed by signal", done, WTERMSIG(status));
      if (WEXITSTATUS(status) != 0) fail_all(pool, "exited with", done, WEXITSTATUS(status));
      if (Clock::now() >= end) continue;
      ++forks;
      if (churning.erase(done)) {
        pid_t c = fork_worker(churner_end(), churn_busy, expected);
        pool.insert(c), churning.insert(c);
      } else {
        pool.insert(fork_worker(worker_end(), busy, expected));
      }
      continue;
    }
    if (Clock::now() >= next_report) {
      std::printf("forks %ld\n", forks);
      std::fflush(stdout);
      next_report += std::chrono::seconds(1);
    }
    // The parent waits as postgres's postmaster and apache's do, in
    // select() (a thread in nanosleep cannot take dynid's remote calls).
    timeval tick{0, 20000};
    ::select(0, nullptr, nullptr, nullptr, &tick);
  }
  std::printf("done, forks %ld\n", forks);
  return 0;
}
