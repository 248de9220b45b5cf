// Process groups end to end (issue 21, dynid/process_group.h): a pool of
// processes of one executable, none busy alone, is busy as a group, and one
// plan serves its busy members.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

std::vector<nlohmann::json> members_of(const nlohmann::json& status, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& t : status.value("targets", nlohmann::json::array()))
    if (t.value("name", "") == name) out.push_back(t);
  return out;
}

// The exit status of `pid` (a child of this process) once it has ended by itself.
int exit_status_of(pid_t pid, std::chrono::seconds timeout) {
  int status = 0;
  for (auto until = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(100ms))
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return -1;
}

// A running dynid listing dyni-prefork, licensed; returns the program's path.
// busy_threshold_percent 40 (kFastOptions): a worker busy 25 ms of each
// 100 ms can never reach it; a pool of four does.
std::string start_for_pools(DyniHost& host) {
  // probe_safe_entries = false: libc's memcpy and memcmp are patched (most of
  // libc's string functions have no probe-safe spot, jit/entry_pads.h).
  host.write_config({"dyni-prefork"}, std::string(kFastOptions) +
                                          "profile_min_samples = 300\nprofile_max_seconds = 10\nprobe_safe_entries = false\n");
  host.license_this_host();
  EXPECT_EQ(host.dyni({"-start"}).exit_code, 0);
  return host.install_program(DYNI_TEST_PREFORK, "dyni-prefork");
}

// The parent's entry in -status -json once it is dynimized; null if it is
// not within `timeout`.
nlohmann::json parent_once_dynimized(const DyniHost& host, pid_t parent, std::chrono::seconds timeout) {
  nlohmann::json found;
  auto dynimized = [&](const nlohmann::json& j) {
    for (const auto& t : members_of(j, "dyni-prefork"))
      if (t.value("pid", 0) == parent) return (found = t).value("status", "") == "dynimized";
    return false;
  };
  return host.wait_for(dynimized, timeout) ? found : nlohmann::json();
}

// A worker dynimized by inheritance since `since` (a status time); null if
// none is within `timeout`.
nlohmann::json worker_inherited_since(const DyniHost& host, const std::string& since, std::chrono::seconds timeout) {
  nlohmann::json child;
  auto inherited = [&](const nlohmann::json& j) {
    for (const auto& t : members_of(j, "dyni-prefork"))
      if (t.value("status", "") == "dynimized" && t["dynimized"]["via"] == "inherited" && t.value("since", "") > since)
        return !(child = t).is_null();
    return false;
  };
  return host.wait_for(inherited, timeout) ? child : nlohmann::json();
}

// The busiest worker leads: it is profiled and counted alone; then every
// other busy worker is dynimized by its plan in turn; then the idle parent,
// by the same plan (what it forks later inherits it).
TEST(Groups, APoolBusyOnlyAsAWholeHasEveryBusyWorkerDynimizedByOnePlanAndComputesTheSame) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  DyniHost host;
  const std::string exe = start_for_pools(host);
  const pid_t parent = host.spawn({exe, "75", "4", "25"});
  std::vector<nlohmann::json> members;
  auto dynimized = [&] {
    std::size_t n = 0;
    for (const auto& t : members) n += t.value("status", "") == "dynimized";
    return n;
  };
  ASSERT_TRUE(host.wait_for(
      [&](const nlohmann::json& j) {
        members = members_of(j, "dyni-prefork");
        return dynimized() == 5;
      },
      65s))
      << "dynimized: " << dynimized() << "\n" << host.status_json().dump() << host.log();
  ASSERT_EQ(members.size(), 5u) << "the parent and four workers";
  pid_t leader = 0;
  for (const auto& t : members)
    if (t["group"]["leader"] == true) leader = t.value("pid", 0);
  ASSERT_NE(leader, 0);
  EXPECT_NE(leader, parent) << "the idle parent was chosen";
  for (const auto& t : members) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["group"]["key"], members[0]["group"]["key"]);
    EXPECT_EQ(t["group"]["members"], 5);
    EXPECT_LT(t.value("cpu_percent", 0.0), 40.0) << "a worker was busy alone";
    const pid_t pid = t.value("pid", 0);
    ASSERT_EQ(t.value("status", ""), "dynimized");
    EXPECT_EQ(t["group"]["parent"], pid == parent);
    if (pid == parent) {
      EXPECT_EQ(t["dynimized"]["via"], "group plan") << "the idle parent, last";
      EXPECT_EQ(t["group"]["follows"], leader);
      continue;
    }
    if (pid == leader) {
      EXPECT_EQ(t["dynimized"]["via"], "injected");
      EXPECT_NE(t["dynimized"].value("layout", "").find("by counts"), std::string::npos);
      EXPECT_EQ(t["group"]["follows"], nullptr);
    } else {
      EXPECT_EQ(t["dynimized"]["via"], "group plan");
      EXPECT_EQ(t["dynimized"]["plan_counted_in"], leader);
      EXPECT_EQ(t["group"]["follows"], leader);
      EXPECT_NE(t["dynimized"].value("layout", "").find(fmt::format("by counts of pid {}", leader)), std::string::npos);
      EXPECT_EQ(t.value("counting", nlohmann::json()), nullptr) << "a follower counts nothing";
    }
    EXPECT_GE(t["dynimized"].value("functions_patched", 0), 1);
    // libc's memcpy and memcmp (pool_copy) too, in every member: counted
    // with the leader's own code, and the followers by the plan's counts.
    nlohmann::json libc;
    for (const auto& m : t["dynimized"].value("more_modules", nlohmann::json::array()))
      if (m.value("module", "").ends_with("/libc.so.6")) libc = m;
    ASSERT_TRUE(libc.is_object()) << "libc is not among its further modules\n" << host.log();
    EXPECT_EQ(libc.value("error", "?"), "");
    EXPECT_GE(libc.value("functions_patched", 0), 1);
    EXPECT_NE(libc.value("layout", "").find(pid == leader ? std::string("by counts")
                                                           : fmt::format("by counts of pid {}", leader)),
              std::string::npos);
  }
  EXPECT_NE(host.log().find("busy as a group"), std::string::npos) << host.log();
  EXPECT_NE(host.log().find("follows the group's plan"), std::string::npos) << host.log();
  // The leader's profile is the group's: its fellow workers were sampled with it.
  RunResult profile = host.dyni({"-profile=" + std::to_string(leader), "-json"});
  ASSERT_EQ(profile.exit_code, 0) << profile.out << profile.err;
  auto sampled = nlohmann::json::parse(profile.out, nullptr, false);
  EXPECT_GE(sampled["profile"].value("processes_sampled", 0), 4) << profile.out;
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  for (const auto& t : members) EXPECT_EQ(host.state_of(t.value("pid", 0)), "undone") << t.value("pid", 0);
  // Every worker checked every round against the parent's result.
  EXPECT_EQ(exit_status_of(parent, 90s), 0) << "a worker computed a wrong result or died\n" << host.log();
}

// Workers born and dying all the while (three recycled ones, each 1 s):
// once the parent is dynimized by the plan, the workers it forks start in
// its cache ("inherited"), with no stop window of their own; none computes
// differently or dies, whatever instant of an injection it was forked at.
TEST(Groups, WorkersForkedByADynimizedParentInheritItsCacheWhileOthersComeAndGo) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  DyniHost host;
  const std::string exe = start_for_pools(host);
  // Four workers to the end, busy 25 %; three more, busy 12 %, 1 s each.
  const pid_t parent = host.spawn({exe, "80", "4", "25", "0", "3"});
  const nlohmann::json parent_status = parent_once_dynimized(host, parent, 70s);
  ASSERT_FALSE(parent_status.is_null()) << host.status_json().dump() << host.log();
  EXPECT_EQ(parent_status["dynimized"]["via"], "group plan") << parent_status.dump();
  const std::string cache = parent_status["dynimized"]["cache"].value("addr", "");
  const nlohmann::json child = worker_inherited_since(host, parent_status.value("since", ""), 10s);
  ASSERT_FALSE(child.is_null()) << host.status_json().dump() << host.log();
  SCOPED_TRACE(child.dump());
  EXPECT_EQ(child["group"]["ppid"], parent);
  EXPECT_EQ(child["dynimized"]["cache"].value("addr", ""), cache) << "the parent's cache, by fork";
  EXPECT_EQ(child["dynimized"].value("patch_windows", -1), 0) << "no stop window of its own";
  EXPECT_GE(child["dynimized"].value("functions_patched", 0), 1);
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err << host.log();
  EXPECT_EQ(host.state_of(parent), "undone");
  // What the parent forks from now on runs the original code; what it forked
  // before and is found after is undone as it is found.
  std::this_thread::sleep_for(3s);
  for (const auto& t : members_of(host.status_json(), "dyni-prefork"))
    EXPECT_NE(t.value("status", ""), "dynimized") << "-undo reaches every worker\n" << t.dump() << host.log();
  EXPECT_EQ(exit_status_of(parent, 90s), 0) << "a worker computed a wrong result or died\n" << host.log();
}

// pgbench -C in miniature: the work is all done by workers living 0.2 s
// each, three at a time at 40 % of a core, beside one long-lived idle
// worker. No worker is ever measured over a busy window; the group's CPU
// shows in the parent's reaped children's time. The parent leads: it is
// profiled with what it forks, counted in the workers it forks while
// counting (their counters are its shared pages), and dynimized by those
// counts; the workers it forks afterwards start in its cache. None computes
// differently or dies.
TEST(Groups, AGroupOfShortLivedWorkersIsLedByItsParentCountedInItsWorkersAndTheyStartDynimized) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  DyniHost host;
  const std::string exe = start_for_pools(host);
  const pid_t parent = host.spawn({exe, "80", "1", "1", "0", "3:40:0.2"});
  const nlohmann::json parent_status = parent_once_dynimized(host, parent, 70s);
  ASSERT_FALSE(parent_status.is_null()) << host.status_json().dump() << host.log();
  SCOPED_TRACE(parent_status.dump());
  std::istringstream log(host.log());
  for (std::string line; std::getline(log, line);)  // the parent's way, for whoever reads the test's output
    if (line.find(fmt::format("pid {}:", parent)) != std::string::npos) std::printf("%s\n", line.c_str());
  EXPECT_EQ(parent_status["group"]["leader"], true);
  EXPECT_EQ(parent_status["group"]["with_descendants"], true);
  EXPECT_EQ(parent_status["dynimized"]["via"], "injected");
  EXPECT_NE(parent_status["dynimized"].value("layout", "").find("by counts"), std::string::npos)
      << "counted in the workers it forked";
  EXPECT_GE(parent_status["dynimized"].value("functions_patched", 0), 6) << "pool_work<0..11> ran in the workers";
  RunResult profile = host.dyni({"-profile=" + std::to_string(parent), "-json"});
  ASSERT_EQ(profile.exit_code, 0) << profile.out << profile.err;
  auto sampled = nlohmann::json::parse(profile.out, nullptr, false);
  EXPECT_GE(sampled["profile"].value("processes_sampled", 0), 10) << "its workers, 0.2 s each\n" << profile.out;
  EXPECT_NE(host.log().find("the parent, profiled and counted with what it forks"), std::string::npos) << host.log();
  const nlohmann::json child = worker_inherited_since(host, parent_status.value("since", ""), 15s);
  ASSERT_FALSE(child.is_null()) << host.status_json().dump() << host.log();
  EXPECT_EQ(child["dynimized"]["cache"].value("addr", ""), parent_status["dynimized"]["cache"].value("addr", ""));
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err << host.log();
  EXPECT_EQ(host.state_of(parent), "undone");
  EXPECT_EQ(exit_status_of(parent, 90s), 0) << "a worker computed a wrong result or died\n" << host.log();
}

}  // namespace
}  // namespace dyni::test
