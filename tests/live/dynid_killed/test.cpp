// dynid SIGKILLed at random instants (issue 11 item 7): while it profiles,
// maps, writes, registers frames and patches a busy target, and while it
// undoes or redoes one. After each kill the target must run on: no thread
// left traced (a stopped thread would hang it), every entry either its
// original bytes or dyni's whole jump (never torn), and the target's own
// check of every result it computes must pass (it exits 3 on a wrong one).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <thread>

#include "dynid/cache_scan.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"
#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

// With every hot module, kills land this long after the target turns
// `dynimizing`, at most (past the first module's counting phase and
// injection, into the further ones'), or, every other trial, this long
// after libc's record appears (its patch and slot windows follow).
constexpr unsigned kKillWindowMs = 6000, kAimedWindowMs = 40;

// How many caches of `tier` with a record the target holds.
std::size_t caches_of(pid_t pid, CacheTier tier) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return 0;
  std::vector<CacheRecord> records = find_cache_records(pid, *maps);
  return static_cast<std::size_t>(
      std::count_if(records.begin(), records.end(), [&](const CacheRecord& r) { return r.tier == tier; }));
}
std::size_t optimized_caches(pid_t pid) { return caches_of(pid, CacheTier::Optimized); }

// Whether any GOT slot a record names holds its copy's address.
bool a_slot_repointed(pid_t pid) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return false;
  for (const CacheRecord& r : find_cache_records(pid, *maps))
    for (const SlotRecord& s : r.slots) {
      auto live = read_target(pid, s.addr, 8);
      uint64_t v = 0;
      if (live && live->size() == 8) std::memcpy(&v, live->data(), 8);
      if (v == s.replacement) return true;
    }
  return false;
}

// TracerPid of every thread of `pid` is 0.
bool no_thread_traced(pid_t pid) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("TracerPid:", 0) == 0 && std::stoi(line.substr(10)) != 0) return false;
  }
  return true;
}

// Every entry a cache of the target records holds its original bytes or a
// whole jump of one of the target's caches (a counting cache's, or the
// optimized one's that re-pointed it); every GOT slot one records holds the
// function ld.so bound or its whole copy's address.
std::string torn_entries(pid_t pid) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return "";
  std::vector<CacheRecord> records = find_cache_records(pid, *maps);
  for (const CacheRecord& r : records)
    for (const SlotRecord& s : r.slots) {
      auto live = read_target(pid, s.addr, 8);
      uint64_t v = 0;
      if (live && live->size() == 8) std::memcpy(&v, live->data(), 8);
      if (!live || (v != s.original && v != s.replacement)) return "torn GOT slot at " + std::to_string(s.addr);
    }
  std::map<uint64_t, std::vector<std::array<uint8_t, 5>>> allowed;  // entry → the bytes it may hold
  for (const CacheRecord& r : records)
    for (const PatchRecord& p : r.patches) allowed[p.addr].insert(allowed[p.addr].end(), {p.original, p.replacement});
  for (const auto& [addr, bytes] : allowed) {
    auto live = read_target(pid, addr, 5);
    if (!live) return "unreadable entry";
    bool whole = std::any_of(bytes.begin(), bytes.end(),
                             [&](const std::array<uint8_t, 5>& b) { return std::equal(b.begin(), b.end(), live->begin()); });
    if (!whole) return "torn entry at " + std::to_string(addr);
  }
  return "";
}

TEST(DynidKilled, AtRandomInstantsTheTargetLivesOnUnchanged) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  std::mt19937 rng(std::random_device{}());
  int during_injection = 0, during_toggle = 0, after = 0;
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    DyniHost host;
    std::string name = "dyni-kill-" + std::to_string(trial);
    host.write_config({name}, std::string(kFastOptions) + "profile_min_samples = 200\nprofile_max_seconds = 5\n");
    host.license_this_host();
    ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
    pid_t target = host.spawn({host.install_program(DYNI_TEST_HOT, name), "60", "2"});
    bool toggle = trial % 4 == 3;  // every fourth trial: kill during -undo or -redo
    std::string awaited = toggle ? "dynimized" : "dynimizing";
    std::string state;
    for (int i = 0; i < 600; ++i, std::this_thread::sleep_for(10ms)) {
      state = host.state_of(target);
      if (state == awaited || state == "dynimized" || state.rfind("failed", 0) == 0) break;
    }
    ASSERT_TRUE(state == "dynimizing" || state == "dynimized") << state << host.log();
    pid_t dynid = host.daemon_pid();
    if (toggle) {
      std::thread toggler([&] {
        for (int i = 0; i < 6; ++i) host.dyni({i % 2 ? "-redo" : "-undo"});
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 120));
      ::kill(dynid, SIGKILL);
      toggler.join();
      ++during_toggle;
    } else {
      // The injection itself takes a few hundred ms here (seconds_optimizing).
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100000));
      ::kill(dynid, SIGKILL);
      bool done = host.log().find("dynimizing -> dynimized") != std::string::npos;  // before the kill
      (done ? after : during_injection)++;
    }
    for (int i = 0; i < 100 && DyniHost::alive(dynid); ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms);  // the target runs on, checking every result
    int status = 0;
    pid_t ended = ::waitpid(target, &status, WNOHANG);
    if (ended != 0) {
      std::string why = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status));
      FAIL() << "the target ended (" << why << ") after dynid was killed " << (toggle ? "during -undo/-redo" : "")
             << "; dynid's log:\n" << host.log();
    }
    EXPECT_TRUE(no_thread_traced(target)) << "a thread is still traced";
    EXPECT_EQ(torn_entries(target), "");
  }
  std::printf("dynid killed %d times while dynimizing, %d during -undo/-redo, %d just after\n", during_injection,
              during_toggle, after);
  EXPECT_GE(during_injection, 5) << "too few kills landed while dynimizing";
}

// The same with every hot module (all_hot_modules): a target hot in its
// own code and in libc's memset, memcpy and memcmp, so that dynid injects a
// second cache, libc's, and re-points the executable's GOT slots at its
// copies, after the first. Kills land while either module is counted (both
// in one phase, each in a counting cache of its own) or injected.
TEST(DynidKilled, WithEveryHotModuleAtRandomInstantsTheTargetLivesOnUnchanged) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  std::mt19937 rng(std::random_device{}());
  constexpr int kTrials = 16;
  int in_further = 0, two_caches = 0, slots = 0, counting_both = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    DyniHost host;
    std::string name = "dyni-kill-all-" + std::to_string(trial);
    host.write_config({name}, std::string(kFastOptions) +
                                  "profile_min_samples = 200\nprofile_max_seconds = 5\nall_hot_modules = true\n"
                                  "probe_safe_entries = false\n");  // libc's string functions: no probe-safe spot
    host.license_this_host();
    ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
    pid_t target = host.spawn({host.install_program(DYNI_LIVE_DYNID_KILLED, name), "60", "2"});
    std::string state;
    for (int i = 0; i < 600; ++i, std::this_thread::sleep_for(10ms)) {
      state = host.state_of(target);
      if (state == "dynimizing" || state == "dynimized" || state.rfind("failed", 0) == 0) break;
    }
    ASSERT_TRUE(state == "dynimizing" || state == "dynimized") << state << host.log();
    pid_t dynid = host.daemon_pid();
    if (trial % 4 == 2) {
      // Aimed at the counting phase once libc's counting cache is there.
      for (int i = 0; i < 2000 && caches_of(target, CacheTier::Counting) < 2; ++i) std::this_thread::sleep_for(2ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1000));
    } else if (trial % 2) {
      // Aimed at libc's patches and GOT slots: its record is written last
      // before any of them.
      for (int i = 0; i < 2000 && optimized_caches(target) < 2; ++i) std::this_thread::sleep_for(2ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % kAimedWindowMs));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % kKillWindowMs));
    }
    ::kill(dynid, SIGKILL);
    for (int i = 0; i < 100 && DyniHost::alive(dynid); ++i) std::this_thread::sleep_for(10ms);
    const std::string log = host.log();
    std::this_thread::sleep_for(300ms);  // the target runs on, checking every result
    int status = 0;
    if (pid_t ended = ::waitpid(target, &status, WNOHANG); ended != 0)
      FAIL() << "the target ended (" << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                                           : "signal " + std::to_string(WTERMSIG(status)))
             << ") after dynid was killed; dynid's log:\n" << log;
    EXPECT_TRUE(no_thread_traced(target)) << "a thread is still traced";
    EXPECT_EQ(torn_entries(target), "");
    const bool further = optimized_caches(target) >= 2;
    // Both counting caches mapped, no optimized one yet: killed while counting both.
    counting_both += caches_of(target, CacheTier::Counting) >= 2 && optimized_caches(target) == 0;
    two_caches += further;
    in_further += further && log.find(": dynimized: ") == std::string::npos;  // killed before the target was dynimized
    slots += a_slot_repointed(target);
  }
  std::printf("dynid killed %d times: %d while both modules were counted, %d with a further module's cache mapped, %d "
              "of them during its injection; %d with the executable's GOT slots at libc's copies\n",
              kTrials, counting_both, two_caches, in_further, slots);
  EXPECT_GE(counting_both, 2) << "too few kills landed while the executable and libc were counted";
  EXPECT_GE(two_caches, 3) << "too few kills came after a further module's cache was mapped";
  EXPECT_GE(in_further, 2) << "too few kills landed while a further module was injected";
  EXPECT_GE(slots, 2) << "too few kills came after the GOT slots were re-pointed: the test shows nothing of them";
}

}  // namespace
}  // namespace dyni::test
