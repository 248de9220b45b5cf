// dyni-test-plugin-host PLUGIN [ROUND_MS=700]: loads PLUGIN with dlopen,
// runs its plugin_work for about ROUND_MS, unloads it with dlclose, and
// again, forever (issue 22 item 4: a hot library unloaded and loaded again
// under dyni). Each round prints "round N load 0xADDR sum S"; every sum must
// be the first round's: on a difference it prints WRONG and exits 3. After
// SIGUSR1 it unloads the plugin for good at the end of the round, prints
// "unloaded" and waits to be killed.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

using Work = uint64_t (*)(uint64_t);

static volatile sig_atomic_t unload_for_good = 0;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dyni-test-plugin-host PLUGIN [ROUND_MS]\n");
    return 2;
  }
  const int round_ms = argc > 2 ? std::atoi(argv[2]) : 700;
  ::signal(SIGUSR1, [](int) { unload_for_good = 1; });
  uint64_t expected = 0;
  for (uint64_t round = 0;; ++round) {
    void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      std::fprintf(stderr, "dlopen: %s\n", dlerror());
      return 2;
    }
    auto work = reinterpret_cast<Work>(dlsym(handle, "plugin_work"));
    if (!work) return 2;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(round_ms);
    const uint64_t per_call = work(2000);
    bool same = round == 0 || per_call == expected;
    while (same && std::chrono::steady_clock::now() < until) same = work(2000) == per_call;  // every call the same
    if (!same) {
      std::printf("WRONG round %" PRIu64 ": %" PRIu64 " != %" PRIu64 "\n", round, per_call, expected);
      std::fflush(stdout);
      return 3;
    }
    expected = per_call;
    std::printf("round %" PRIu64 " load %p sum %" PRIu64 "\n", round, reinterpret_cast<void*>(work), per_call);
    std::fflush(stdout);
    dlclose(handle);
    if (unload_for_good) {
      std::printf("unloaded\n");
      std::fflush(stdout);
      for (;;) ::pause();
    }
  }
}
