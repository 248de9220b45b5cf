// A busy target that crashes for its own reasons on request: after SIGUSR1
// its hot function's pointer is NULL, which the hot path dereferences (in
// the copy, when dynimized), and its SIGSEGV handler writes glibc's
// backtrace() to OUT_FILE, as a server's own stack printer does, then exits 4.
// (tests/integration/daemon_test.cpp maps the addresses with dyni -addr2orig.)
// usage: dyni-test-crash SECONDS OUT_FILE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

static int one = 1;
static int* volatile source = &one;
static int out_fd = -1;

__attribute__((noinline)) unsigned long crashing_work(unsigned long x) {
  for (int i = 0; i < 4000; ++i) x = x * 6364136223846793005UL + 1;
  x += static_cast<unsigned long>(*source);
  return x;
}

__attribute__((noinline)) unsigned long calling_work(unsigned long x) {
  for (int i = 0; i < 1000; ++i) x = x * 2862933555777941757UL + 3;
  return crashing_work(x) ^ (x >> 7);
}

static void on_segv(int) {
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, out_fd);
  _exit(4);
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[1]));
  out_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) return 2;
  void* warm[4];
  backtrace(warm, 4);  // loads libgcc_s now: the handler must not
  signal(SIGUSR1, [](int) { source = nullptr; });
  signal(SIGSEGV, on_segv);
  unsigned long sink = 1;
  while (std::chrono::steady_clock::now() < until)
    for (int k = 0; k < 100; ++k) sink = calling_work(sink);
  std::printf("%lu\n", sink);
  return 0;
}
