// A signal-heavy target. Two workers run hot code; a signaller thread sends
// each of them SIGUSR1 every 200 us. The handler runs on an alternate signal
// stack and calls hot code too (sig_hash, also called by the workers), so
// signal frames holding hot PCs sit on the altstack and on the threads'
// stacks whenever dynid stops the world. A handler whose result is wrong
// prints WRONG and exits 3; the round's line does not depend on how many
// signals arrived. System calls interrupted by the signals are restarted
// (SA_RESTART) or retried.
// usage: target ROUNDS
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/live/rounds.h"

namespace {

std::atomic<uint64_t> handled{0};
uint64_t expected_in_handler = 0;
// Shared with the detached threads, which run on while main returns and the
// process exits: never on main's stack (a reference run died of SIGSEGV in
// CI when they were).
std::atomic<pthread_t> workers[2];
std::atomic<int> started{0};
std::atomic<uint64_t> last[2] = {0, 0};
std::atomic<int> generation[2] = {0, 0};

[[gnu::noinline]] uint64_t sig_hash(uint64_t x, int n) {
  for (int i = 0; i < n; ++i) x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ULL + static_cast<uint64_t>(i);
  return x;
}

// Work of its own too, so that both functions are hot.
[[gnu::noinline]] uint64_t sig_fold(uint64_t x, int n) {
  for (int i = 0; i < n; ++i) {
    x = sig_hash(x, 16) ^ static_cast<uint64_t>(i);
    for (int k = 0; k < 16; ++k) x = (x << 7 | x >> 57) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(k);
  }
  return x;
}

void on_usr1(int) {
  if (sig_fold(7, 8) != expected_in_handler) {
    static const char wrong[] = "WRONG in the signal handler\n";
    (void)!write(1, wrong, sizeof wrong - 1);
    std::_Exit(3);
  }
  handled.fetch_add(1, std::memory_order_relaxed);
}

void on_own_altstack() {
  stack_t ss{};
  ss.ss_size = 64 * 1024;
  ss.ss_sp = std::malloc(ss.ss_size);
  sigaltstack(&ss, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  expected_in_handler = sig_fold(7, 8);
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  for (auto& w : workers) w = pthread_self();
  std::thread([] {
    while (started.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (;;) {
      for (auto& w : workers) pthread_kill(w.load(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }).detach();
  // The workers compute rounds forever; main prints what they agree on.
  for (int w = 0; w < 2; ++w)
    std::thread([w] {
      on_own_altstack();
      workers[w] = pthread_self();
      started.fetch_add(1);
      for (;;) {
        last[w] = sig_fold(static_cast<uint64_t>(w + 1), 20000);
        generation[w].fetch_add(1);
      }
    }).detach();
  while (started.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [&] {
    int g0 = generation[0].load(), g1 = generation[1].load();
    while (generation[0].load() < g0 + 2 || generation[1].load() < g1 + 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return std::to_string(last[0].load()) + " " + std::to_string(last[1].load()) +
           (handled.load() > 0 ? " handled" : " none handled");
  });
}
