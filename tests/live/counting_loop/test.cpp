// A thread in a counting copy's loop across the switch
// (tests/live/counting_loop/README.md; issue 19 item 3).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "dynid/world_stop.h"
#include "profiler/process_maps.h"
#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

// The side file's value after `key` ("progress 1234" → 1234), or 0.
uint64_t side_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  uint64_t v = 0;
  while (in >> k) {
    if (k == "started") continue;
    if (!(in >> v)) break;
    if (k == key) return v;
  }
  return 0;
}

// How many times `word` stands in the side file.
int side_count(const std::string& path, const std::string& word) {
  std::ifstream in(path);
  std::string w;
  int n = 0;
  while (in >> w) n += w == word;
  return n;
}

// The results of the long calls that ended, in order.
std::vector<std::string> side_results(const std::string& path) {
  std::ifstream in(path);
  std::string w, r;
  std::vector<std::string> out;
  while (in >> w)
    if (w == "done" && in >> r) out.push_back(r);
  return out;
}

bool wait_for_count(const std::string& path, const std::string& word, int n, std::chrono::seconds timeout) {
  for (auto until = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(10ms))
    if (side_count(path, word) >= n) return true;
  return false;
}

// `length` bytes of `pid`'s memory at `addr` (empty when unreadable).
std::string read_memory(pid_t pid, uint64_t addr, std::size_t length) {
  int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out(length, '\0');
  ssize_t n = ::pread(fd, out.data(), length, static_cast<off_t>(addr));
  ::close(fd);
  return n == static_cast<ssize_t>(length) ? out : "";
}

uint64_t progress(pid_t pid, uint64_t addr) {
  std::string bytes = read_memory(pid, addr, 8);
  uint64_t v = 0;
  if (bytes.size() == 8) std::memcpy(&v, bytes.data(), 8);
  return v;
}

// Iterations per second of the long run, over `how_long`.
double rate(pid_t pid, uint64_t addr, std::chrono::milliseconds how_long) {
  uint64_t a = progress(pid, addr);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(how_long);
  uint64_t b = progress(pid, addr);
  return static_cast<double>(b - a) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The mapping of `pid` that holds `addr`: [start, end), or {0, 0}.
std::pair<uint64_t, uint64_t> mapping_of(pid_t pid, uint64_t addr) {
  auto maps = profiler::read_maps(pid);
  if (maps)
    for (const auto& m : *maps)
      if (addr >= m.start && addr < m.end) return {m.start, m.end};
  return {0, 0};
}

TEST(CountingLoop, AThreadInACountingLoopRunsUncountedAtFullSpeedAfterTheSwitch) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_COUNTING_LOOP, "dyni-cntloop");
  const std::string expected = s.reference({"rounds"});
  ASSERT_FALSE(expected.empty());
  const std::string expected_long = s.reference({"long"}, 1);
  ASSERT_FALSE(expected_long.empty());
  const std::string side = s.host.dir() + "/side.txt";
  // No pauses: the long call must enter through an entry led to its counting copy.
  s.start({"serve", side}, scenario_options() +
                               "counting_duty_percent = 100\ncounting_min_seconds = 4\ncounting_max_seconds = 8\n");
  uint64_t progress_addr = 0;
  for (int i = 0; i < 100 && !progress_addr; ++i, std::this_thread::sleep_for(50ms))
    progress_addr = side_value(side, "progress");
  ASSERT_NE(progress_addr, 0u) << "the target never said where its progress is";

  // Counting: the long call starts inside the counting copy.
  ASSERT_TRUE(s.host.wait_for([&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t["pid"] == s.pid() && t.value("counting", nlohmann::json()).is_object())
        return t["counting"].value("phase", "") == "counting" && t["counting"].value("counts_total", 0) > 0;
    return false;
  }, 60s)) << s.host.state_of(s.pid()) << s.host.log();
  ASSERT_EQ(::kill(s.pid(), SIGUSR1), 0);
  ASSERT_TRUE(wait_for_count(side, "started", 1, 5s));
  const double while_counting = rate(s.pid(), progress_addr, 500ms);

  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  ASSERT_EQ(side_count(side, "done"), 0) << "the long call ended before the switch: make it longer";
  nlohmann::json c = s.counting_facts("counting_loop");
  ASSERT_EQ(c.value("phase", ""), "ended") << c.dump();

  // The thread still runs the counting copy's loop: its PC is in the counting cache at times.
  const uint64_t counting_cache = std::stoull(c["cache"].value("addr", "0"), nullptr, 16);
  const auto [cache_start, cache_end] = mapping_of(s.pid(), counting_cache);
  ASSERT_NE(cache_start, 0u) << c.dump();
  const pid_t tid = static_cast<pid_t>(side_value(side, "tid"));
  int in_counting_copy = 0;
  for (int i = 0; i < 20; ++i, std::this_thread::sleep_for(20ms)) {
    auto w = WorldStop::stop(s.pid(), 1s);
    ASSERT_TRUE(w) << w.error().message();
    auto it = w->threads().find(tid);
    ASSERT_NE(it, w->threads().end());
    uint64_t pc = it->second.regs.rip;
    in_counting_copy += pc >= cache_start && pc < cache_end;
  }
  EXPECT_GT(in_counting_copy, 0) << "the long call left the counting copy before the phase ended";

  // ... uncounted: no counter moves while it loops.
  const uint64_t counters = std::stoull(c["cache"].value("counters_addr", "0"), nullptr, 16);
  const std::size_t counters_bytes = c["cache"].value("counters_bytes", 0);
  ASSERT_GT(counters_bytes, 0u) << c.dump();
  const std::string before = read_memory(s.pid(), counters, counters_bytes);
  const double after_switch = rate(s.pid(), progress_addr, 1000ms);
  const std::string after = read_memory(s.pid(), counters, counters_bytes);
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(before, after) << "a counter still counts after the phase ended";
  EXPECT_EQ(side_count(side, "done"), 0) << "measured after the long call ended";

  ASSERT_TRUE(wait_for_count(side, "done", 1, 60s)) << "the long call never ended";

  // ... and at the speed of code that does not count: a long call made
  // after -undo, in the original code, is the yardstick.
  RunResult undo = s.host.dyni({"-undo"});
  ASSERT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  ASSERT_EQ(::kill(s.pid(), SIGUSR1), 0);
  ASSERT_TRUE(wait_for_count(side, "started", 2, 5s));
  const double original = rate(s.pid(), progress_addr, 1000ms);
  std::printf("counting_loop: the long call at %.3g iterations/s while counting, %.3g after the switch, "
              "%.3g in the original code\n", while_counting, after_switch, original);
  EXPECT_GT(after_switch, 0.7 * original) << "the thread kept paying for counting after the switch";
  const std::vector<std::string> results = side_results(side);
  ASSERT_GE(results.size(), 1u);
  EXPECT_EQ(results[0], expected_long) << "the long call begun in a counting copy computed another result";
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
