// Process groups end to end (issue 21, dynid/process_group.h): a pool of
// processes of one executable, none busy alone, is busy as a group, and one
// plan serves its busy members.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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

// The busiest worker leads: it is profiled and counted alone; then every
// other busy worker is dynimized by its plan in turn; the idle parent never.
TEST(Groups, APoolBusyOnlyAsAWholeHasEveryBusyWorkerDynimizedByOnePlanAndComputesTheSame) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  DyniHost host;
  // busy_threshold_percent 40 (kFastOptions): each worker, busy 25 ms of
  // each 100 ms, can never reach it; the pool of four does.
  host.write_config({"dyni-prefork"}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
  host.license_this_host();
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  const std::string exe = host.install_program(DYNI_TEST_PREFORK, "dyni-prefork");
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
        return dynimized() == 4;
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
    if (pid == parent) {
      EXPECT_EQ(t.value("status", ""), "waiting") << "the idle parent";
      continue;
    }
    ASSERT_EQ(t.value("status", ""), "dynimized");
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
  }
  EXPECT_NE(host.log().find("busy as a group"), std::string::npos) << host.log();
  EXPECT_NE(host.log().find("follows the group's plan"), std::string::npos) << host.log();
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  for (const auto& t : members) {
    if (t.value("pid", 0) == parent) continue;
    EXPECT_EQ(host.state_of(t.value("pid", 0)), "undone") << t.value("pid", 0);
  }
  // Every worker checked every round against the parent's result.
  EXPECT_EQ(exit_status_of(parent, 90s), 0) << "a worker computed a wrong result or died\n" << host.log();
}

}  // namespace
}  // namespace dyni::test
