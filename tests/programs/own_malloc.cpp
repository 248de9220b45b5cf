// dyni-test-own-malloc: an executable that defines malloc, free, calloc and
// realloc itself (as one with a statically linked jemalloc does; these
// forward to glibc's), and spins in its own code. Prints "ready", then
// computes until its stdin closes. A thread stopped in its code may be
// halfway through its malloc: it must never take dyni's remote calls.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
__attribute__((visibility("default"))) void* malloc(size_t n) { return __libc_malloc(n); }
__attribute__((visibility("default"))) void free(void* p) { __libc_free(p); }
__attribute__((visibility("default"))) void* calloc(size_t n, size_t s) { return __libc_calloc(n, s); }
__attribute__((visibility("default"))) void* realloc(void* p, size_t n) { return __libc_realloc(p, n); }
}

static std::atomic<bool> done{false};
static std::atomic<unsigned long> sink;

__attribute__((noinline)) static void spin() {
  unsigned long x = 1;
  while (!done)
    for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005UL + 1;
  sink += x;
}

int main() {
  std::printf("ready\n");
  std::fflush(stdout);
  std::thread worker(spin);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  done = true;
  worker.join();
  return 0;
}
