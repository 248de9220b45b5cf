// A target with a known profile: 24 functions, function k doing (24 - k) units
// of work per round, so function k gets (24-k)/300 of the CPU (8 % down to 0.3 %),
// and hot_short_entry 8 units (2.6 %, hot enough for every hot set).
// Every round's result is checked against the first one's: a wrong result
// (dyni's copies computing differently) prints WRONG and exits 3.
// usage: dyni-test-hot [SECONDS=30] [THREADS=2]   (THREADS workers; main waits; 0: main works)
// With DYNI_HOT_PAUSE=FILE, the workers wait between rounds while FILE exists
// (in nanosleep, outside the hot functions). With DYNI_HOT_PERF_MAP=1 it
// keeps a perf map of its own open, as a JIT does (/tmp/perf-PID.map, one
// line: "1000 10 jit_code"), and prints "map" once it is written.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static std::atomic<unsigned long> sink;

template <int K>
__attribute__((noinline)) unsigned long hot_work(unsigned long x) {
  for (int unit = 0; unit < 24 - K; ++unit)
    for (int i = 0; i < 2000; ++i) x = x * 6364136223846793005UL + K + 1;
  return x;
}

// 8 units of work in a function whose instructions before its first
// branch are all shorter than 6 bytes: its entry patch can only go at its
// second instruction's start (jit/patch_plan.h), where a uprobe breaks it.
extern "C" unsigned long hot_short_entry(unsigned long x);
asm(R"(
        .intel_syntax noprefix
        .text
        .globl hot_short_entry
        .type hot_short_entry, @function
hot_short_entry:
        .cfi_startproc
        push rbx
        .cfi_def_cfa_offset 16
        .cfi_offset rbx, -16
        mov ebx, 16000
        mov rax, rdi
1:      imul rax, rax, 5
        add rax, 7
        sub ebx, 1
        jne 1b
        pop rbx
        .cfi_def_cfa_offset 8
        ret
        .cfi_endproc
        .size hot_short_entry, . - hot_short_entry
        .att_syntax prefix
)");

template <int... K>
unsigned long one_round(unsigned long x, std::integer_sequence<int, K...>) {
  ((x = hot_work<K>(x)), ...);
  return hot_short_entry(x);
}

static unsigned long round_from_one() { return one_round(1, std::make_integer_sequence<int, 24>{}); }

static void run(std::chrono::steady_clock::time_point until, unsigned long expected) {
  static const char* const pause = std::getenv("DYNI_HOT_PAUSE");
  while (std::chrono::steady_clock::now() < until) {
    while (pause && ::access(pause, F_OK) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    unsigned long x = round_from_one();
    if (x != expected) {
      std::printf("WRONG round: %lu, not %lu\n", x, expected);
      std::fflush(stdout);
      std::_Exit(3);
    }
    sink += x;
  }
}

int main(int argc, char** argv) {
  int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> pool;
  const unsigned long expected = round_from_one();
  if (const char* map = std::getenv("DYNI_HOT_PERF_MAP"); map && std::string(map) == "1") {
    const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);  // kept open
    if (fd < 0 || ::write(fd, "1000 10 jit_code\n", 17) != 17) return 4;
    std::printf("map\n");
    std::fflush(stdout);
  }
  // The main thread waits, parked in a system call, as a server's threads do;
  // with THREADS=0 it does the work alone (a CPU-bound program).
  if (threads == 0) run(until, expected);
  for (int i = 0; i < threads; ++i) pool.emplace_back(run, until, expected);
  for (auto& t : pool) t.join();
  return 0;
}
