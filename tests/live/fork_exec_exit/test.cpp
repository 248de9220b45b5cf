// fork, exec and exit during injection (tests/live/fork_exec_exit/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "dynid/cache_scan.h"
#include "profiler/process_maps.h"
#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

// dyni's caches in `pid` of one tier: the optimized code, or counting copies.
std::size_t caches_in(pid_t pid, CacheTier tier = CacheTier::Optimized) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return 0;
  std::vector<CacheRecord> records = find_cache_records(pid, *maps);
  return static_cast<std::size_t>(
      std::count_if(records.begin(), records.end(), [&](const CacheRecord& r) { return r.tier == tier; }));
}

// Waits until `pid`'s state is `state`; or the state "dynimizing" was seen
// go by. Returns the last state seen.
std::string wait_for_state(const DyniHost& host, pid_t pid, const std::string& state, std::chrono::seconds timeout) {
  std::string now;
  for (auto until = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(5ms)) {
    now = host.state_of(pid);
    if (now == state || now.rfind("failed", 0) == 0) break;
  }
  return now;
}

// The THP_enabled line of /proc/PID/status: "0" once the process turned THP
// off for itself with PR_SET_THP_DISABLE(1, 0).
std::string thp_enabled(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("THP_enabled:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 12));
  return "?";
}

// Like mariadbd, the "fork" target turned THP off for itself: its cache is on
// a huge page all the same (dynid/cache_huge_pages.h), and the flag reads as
// the target set it.
void expect_huge_cache_and_flag_kept(const Scenario& s) {
  EXPECT_EQ(thp_enabled(s.pid()), "0") << "the target's PR_SET_THP_DISABLE was not set back";
  nlohmann::json cache = s.dynimized_facts("forker").value("cache", nlohmann::json::object());
  const std::string note = cache.value("huge_page_note", "");
  if (note.find("lifted") == std::string::npos) {
    // Only a host or kernel that cannot (THP off, Linux < 6.18) says so, and is let off.
    EXPECT_TRUE(note.find("off on this host") != std::string::npos || note.find("cannot lift") != std::string::npos)
        << cache.dump();
    std::printf("huge pages not checked: %s\n", note.c_str());
    return;
  }
  EXPECT_GE(cache.value("huge_page_bytes", uint64_t{0}), uint64_t{2} << 20) << cache.dump();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The child has no perf map, origins or symbol file of its own from the
// injection (it was forked after): dynid makes them when it adopts the child,
// from the child's memory. Its perf map names each optimized copy as the
// parent's does, -addr2orig maps its addresses, gdb has a symbol file.
void expect_child_named_like_its_parent(const Scenario& s, pid_t child, const nlohmann::json& facts) {
  const std::vector<std::string> parent_map = lines_of(fmt::format("/tmp/perf-{}.map", s.pid()));
  const std::vector<std::string> child_map = lines_of(fmt::format("/tmp/perf-{}.map", child));
  EXPECT_GE(child_map.size(), 1u) << "the child's perf map";
  for (const std::string& line : child_map)
    EXPECT_NE(std::find(parent_map.begin(), parent_map.end(), line), parent_map.end())
        << "a copy the parent's map does not name so: " << line;
  EXPECT_EQ(facts.value("perf_map", nlohmann::json()), nlohmann::json(fmt::format("/tmp/perf-{}.map", child)))
      << facts.dump();
  const nlohmann::json gdb_command = facts.value("gdb_command", nlohmann::json());
  const std::string gdb = gdb_command.is_string() ? gdb_command.get<std::string>() : "";
  ASSERT_EQ(gdb.rfind("add-symbol-file ", 0), 0u) << facts.dump();
  EXPECT_EQ(::access(gdb.substr(gdb.find(' ') + 1).c_str(), R_OK), 0) << gdb;
  auto expect_mapped_back = [&](const std::string& line) {
    const std::string addr = "0x" + line.substr(0, line.find(' '));
    RunResult where = s.host.dyni({fmt::format("-addr2orig={}", child), addr});
    EXPECT_EQ(where.exit_code, 0) << where.out << where.err;
    EXPECT_NE(where.out.find("(original 0x"), std::string::npos) << where.out;
    EXPECT_NE(where.out.find("optimized copy"), std::string::npos) << where.out;
  };
  if (!child_map.empty()) expect_mapped_back(child_map.front());
  // Each further module's cache (libc's) is named too: its copies in the
  // perf map, mapped back by -addr2orig, its parent's symbol file for gdb.
  for (const nlohmann::json& m : facts.value("more_modules", nlohmann::json::array())) {
    const uint64_t lo = std::stoull(m["cache"].value("addr", "0"), nullptr, 16);
    const uint64_t hi = lo + m["cache"].value("bytes", uint64_t{0});
    auto in_cache = std::find_if(child_map.begin(), child_map.end(), [&](const std::string& line) {
      const uint64_t at = std::stoull(line.substr(0, line.find(' ')), nullptr, 16);
      return lo <= at && at < hi;
    });
    EXPECT_NE(in_cache, child_map.end()) << "no copy of " << m.value("module", "?") << "'s cache in the child's map\n"
                                         << m.dump();
    if (in_cache != child_map.end()) expect_mapped_back(*in_cache);
    const nlohmann::json more_gdb = m.value("gdb_command", nlohmann::json());
    const std::string command = more_gdb.is_string() ? more_gdb.get<std::string>() : "";
    ASSERT_EQ(command.rfind("add-symbol-file ", 0), 0u) << m.dump();
    EXPECT_EQ(::access(command.substr(command.find(' ') + 1).c_str(), R_OK), 0) << command;
  }
  ::unlink(fmt::format("/tmp/perf-{}.map", child).c_str());
}

TEST(ForkExecExit, ForkedChildrenKeepWorkingAndALongLivedOneShowsAsDynimized) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_FORK_EXEC_EXIT, "dyni-forker");
  std::string expected = s.reference({"plain"});
  ASSERT_FALSE(expected.empty());
  const std::string pid_file = s.host.dir() + "/child.pid";
  // Its hot set is small: on a huge page all the same (small_cache_kib = 0),
  // where a fork splits it.
  // probe_safe_entries = false: libc's string functions have no probe-safe spot (jit/entry_pads.h).
  s.start({"fork", pid_file}, scenario_options() + "small_cache_kib = 0\nprobe_safe_entries = false\n");
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  ASSERT_TRUE(s.wait_for_more_lines(3)) << s.check_output(expected);
  expect_huge_cache_and_flag_kept(s);
  ::kill(s.pid(), SIGUSR2);
  pid_t child = 0;
  for (int i = 0; i < 100 && child == 0; ++i, std::this_thread::sleep_for(50ms)) std::ifstream(pid_file) >> child;
  ASSERT_GT(child, 0) << "no long-lived child";
  struct KillAtEnd {
    pid_t pid;
    ~KillAtEnd() { ::kill(pid, SIGKILL); }
  } kill_child{child};
  // It inherited the caches and the patches, its own code's and libc's: a
  // new dynid would adopt it, and so does this one.
  EXPECT_EQ(caches_in(child), 2u);
  EXPECT_EQ(caches_in(child, CacheTier::Counting), 2u) << "the ended counting caches come along";
  std::string child_state = wait_for_state(s.host, child, "dynimized", 20s);
  EXPECT_EQ(child_state, "dynimized") << s.host.log();
  EXPECT_EQ(thp_enabled(child), "0") << "the child inherits the flag as the target set it";
  nlohmann::json child_facts = s.host.dynimized_with_files(child);
  ASSERT_FALSE(child_facts.empty()) << "the child's perf map or gdb file was never named\n"
                                    << s.host.status_json().dump() << s.host.log();
  EXPECT_EQ(child_facts.value("adopted", false), true) << child_facts.dump();
  // Both modules' caches, in either order: the first is the one the child
  // shares with its parent's first when dynid knows it, else the one with
  // the most live patches.
  const nlohmann::json more = child_facts.value("more_modules", nlohmann::json::array());
  ASSERT_EQ(more.size(), 1u) << child_facts.dump();
  EXPECT_EQ(more[0].value("error", "?"), "") << child_facts.dump();
  std::string libc = more[0].value("module", ""), own = child_facts.value("module", "");
  if (!libc.ends_with("/libc.so.6")) std::swap(libc, own);
  EXPECT_TRUE(libc.ends_with("/libc.so.6")) << child_facts.dump();
  EXPECT_TRUE(own.ends_with("/dyni-forker")) << child_facts.dump();
  EXPECT_FALSE(text_equals_file(child, libc)) << "the child's libc entries lead to the copies it inherited";
  expect_child_named_like_its_parent(s, child, child_facts);
  ASSERT_TRUE(s.wait_for_more_lines(4)) << s.check_output(expected);
  RunResult undo = s.host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_EQ(s.host.state_of(child), "undone");
  EXPECT_TRUE(text_equals_file(child, libc)) << "-undo gives the child's libc its file's bytes back";
  EXPECT_TRUE(text_equals_file(s.pid(), libc)) << "-undo gives the parent's libc its file's bytes back";
  ASSERT_TRUE(s.wait_for_more_lines(4)) << s.check_output(expected);
  RunResult redo = s.host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  EXPECT_FALSE(text_equals_file(child, libc)) << "-redo patches the child's libc again";
  ASSERT_TRUE(s.wait_for_more_lines(4)) << s.check_output(expected);
  EXPECT_TRUE(DyniHost::alive(child)) << "the long-lived child ended";
  EXPECT_EQ(s.check_output(expected), "");
}

TEST(ForkExecExit, AnExecDuringInjectionLeavesANewPlainTargetThatIsDynimizedAfresh) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_FORK_EXEC_EXIT, "dyni-execer");
  std::string expected = s.reference({"plain"});
  ASSERT_FALSE(expected.empty());
  s.start({"exec"});
  std::string state = wait_for_state(s.host, s.pid(), "dynimizing", 60s);
  ASSERT_TRUE(state == "dynimizing" || state == "dynimized") << state << s.host.log();
  ::kill(s.pid(), SIGUSR2);  // the exec comes at the end of the round under way
  for (int i = 0; i < 200 && s.host.log().find("exec'd") == std::string::npos; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_NE(s.host.log().find("exec'd"), std::string::npos) << "dynid did not see the exec\n" << s.host.log();
  // The new image is plain, and becomes dynimized on its own profile.
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  EXPECT_EQ(caches_in(s.pid()), 2u) << "its own code's and libc's\n" << s.host.log();
  EXPECT_EQ(caches_in(s.pid(), CacheTier::Counting), 2u) << "the new image was counted afresh\n" << s.host.log();
  ASSERT_TRUE(s.wait_for_more_lines(3)) << s.check_output(expected);
  EXPECT_EQ(s.check_output(expected), "");
}

TEST(ForkExecExit, ATargetThatExitsAtAnyInstantOfItsInjectionLeavesDynidHealthy) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  std::mt19937 rng(std::random_device{}());
  Scenario s(DYNI_LIVE_FORK_EXEC_EXIT, "dyni-exiter");
  s.start({"plain"});
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    if (trial > 0) s.respawn({"plain"});
    std::string state = wait_for_state(s.host, s.pid(), "dynimizing", 60s);
    ASSERT_TRUE(state == "dynimizing" || state == "dynimized") << state << s.host.log();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150000));
    s.host.kill_target(s.pid());
    pid_t dynid = s.host.daemon_pid();
    ASSERT_TRUE(s.host.wait_for([&](const nlohmann::json& j) {
      for (const auto& t : j.value("targets", nlohmann::json::array()))
        if (t.value("pid", 0) == s.pid()) return false;
      return true;
    })) << "the dead target stays listed\n" << s.host.log();
    ASSERT_TRUE(DyniHost::alive(dynid)) << s.host.log();
  }
  EXPECT_EQ(s.host.log().find("internal error"), std::string::npos) << s.host.log();
}

}  // namespace
}  // namespace dyni::test
