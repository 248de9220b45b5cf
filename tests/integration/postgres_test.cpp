// postgres from Debian (a copy, under a test-only name), a private cluster
// on a Unix socket serving pgbench -S with 4 clients: one backend per
// client, so the work is spread over a group of processes (issue 21). A
// backend becomes dynimized, then the others by its plan, then the idle
// postmaster, whose new backends start dynimized in its cache; a fixed set
// of queries answers the same before, while dynimized and after -undo;
// pgbench sees no error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPostgresBin = "/usr/lib/postgresql/15/bin";

std::vector<std::string> as_postgres(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"});
  return argv;
}

class Postgres : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
    for (const char* tool : {"/postgres", "/initdb", "/pgbench", "/psql"})
      if (::access((std::string(kPostgresBin) + tool).c_str(), X_OK) != 0)
        GTEST_SKIP() << kPostgresBin << tool << " is not installed (apt-get install postgresql)";
    if (host.run({"/usr/bin/id", "postgres"}).exit_code != 0) GTEST_SKIP() << "no postgres user (apt-get install postgresql)";
    data_ = host.dir() + "/pgdata";
    std::filesystem::create_directory(data_);
    ASSERT_EQ(host.run({"/bin/chown", "postgres:postgres", data_}).exit_code, 0);
    RunResult init = host.run(as_postgres({std::string(kPostgresBin) + "/initdb", "-D", data_, "-U", "postgres",
                                           "--auth=trust", "--no-sync"}));
    ASSERT_EQ(init.exit_code, 0) << init.out << init.err;
    exe_ = host.install_program(std::string(kPostgresBin) + "/postgres", "dyni-postgres");
    port_ = free_tcp_port();  // names the socket; nothing listens on TCP
    // Its log goes to a file (exec: the pid is the postmaster's).
    postmaster_ = host.spawn({"/bin/sh", "-c",
                              fmt::format("exec /usr/bin/setpriv --reuid=postgres --regid=postgres --init-groups {} -D {} "
                                          "-p {} -k {} -c listen_addresses= -c fsync=off -c max_connections=40 "
                                          "2> {}/postgres.log",
                                          exe_, data_, port_, data_, host.dir())});
    for (int i = 0; i < 100 && psql("SELECT 1").out != "1\n"; ++i) std::this_thread::sleep_for(100ms);
    ASSERT_EQ(psql("SELECT 1").out, "1\n") << "postgres did not start";
    RunResult pgbench = host.run({std::string(kPostgresBin) + "/pgbench", "-i", "-s", "4", "-q", "-h", data_, "-p",
                                  std::to_string(port_), "-U", "postgres", "postgres"});
    ASSERT_EQ(pgbench.exit_code, 0) << pgbench.out << pgbench.err;
  }
  void TearDown() override {
    if (postmaster_ <= 0) return;
    ::kill(postmaster_, SIGINT);  // fast shutdown: the backends end with it
    for (int i = 0; i < 100 && DyniHost::alive(postmaster_); ++i) std::this_thread::sleep_for(100ms);
  }
  RunResult psql(const std::string& sql) const {
    return host.run({std::string(kPostgresBin) + "/psql", "-X", "-At", "-h", data_, "-p", std::to_string(port_), "-U",
                     "postgres", "-d", "postgres", "-c", sql});
  }
  // The answers to a fixed set of queries over pgbench's tables.
  std::string answers() const {
    std::string out;
    for (const char* sql :
         {"SELECT count(*), sum(abalance), sum(bid), md5(string_agg(filler, '' ORDER BY aid)) FROM pgbench_accounts "
          "WHERE aid BETWEEN 1000 AND 90000",
          "SELECT bid, count(*), sum(aid % 97) FROM pgbench_accounts GROUP BY bid ORDER BY bid",
          "SELECT aid, abalance FROM pgbench_accounts WHERE aid % 9973 = 1 ORDER BY aid",
          "SELECT a.aid, b.bbalance FROM pgbench_accounts a JOIN pgbench_branches b USING (bid) "
          "WHERE a.aid BETWEEN 5000 AND 5040 ORDER BY a.aid"})
      out += psql(sql).out;
    return out;
  }
  // The backend (a member of the group, not the postmaster) dynimized, or 0.
  // The dynimized backends' status entries.
  std::vector<nlohmann::json> dynimized_backends(const nlohmann::json& status) const {
    std::vector<nlohmann::json> out;
    for (const auto& t : status.value("targets", nlohmann::json::array()))
      if (t.value("name", "") == "dyni-postgres" && t.value("status", "") == "dynimized" && t["pid"] != postmaster_)
        out.push_back(t);
    return out;
  }

  static nlohmann::json target_of(const nlohmann::json& status, pid_t pid) {
    for (const auto& t : status.value("targets", nlohmann::json::array()))
      if (t.value("pid", 0) == pid) return t;
    return nullptr;
  }

  DyniHost host;
  std::string data_, exe_;
  int port_ = 0;
  pid_t postmaster_ = 0;
};

TEST_F(Postgres, UnderPgbenchItsBusyBackendsAreDynimizedByOnePlanAndAnswerTheSame) {
  const std::string before = answers();
  ASSERT_GT(before.size(), 300u) << before;
  const std::string bench_out = host.dir() + "/pgbench.out";
  // The load outlasts every step below (it is stopped at the end).
  pid_t bench = host.spawn({"/bin/sh", "-c",
                            fmt::format("exec {}/pgbench -S -n -c 4 -j 2 -T 400 -P 5 -h {} -p {} -U postgres postgres > "
                                        "'{}' 2>&1",
                                        kPostgresBin, data_, port_, bench_out)});
  // No backend alone reaches 70 % of a core (4 of them and pgbench share 2
  // CPUs): the group does (process_group.h), and its busiest is dynimized.
  host.write_config({"dyni-postgres"},
                    "[options]\nbusy_threshold_percent = 70\nbusy_window_ms = 600\nscan_interval_ms = 100\n"
                    "profile_max_seconds = 20\n");
  host.license_this_host();
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  // The leader, profiled and counted alone; then the other busy backends,
  // one by one, by its plan.
  std::vector<nlohmann::json> backends;
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) { return !(backends = dynimized_backends(j)).empty(); }, 240s))
      << host.status_json().dump() << host.log();
  const pid_t leader = backends.front().value("pid", 0);
  std::printf("postgres backend: %s\n", backends.front().dump().c_str());
  EXPECT_EQ(answers(), before) << "dynimized";
  // At least three, and none on its way (an -undo then would ask to be run again).
  auto settled = [&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t.value("state", "") == "profiling" || t.value("state", "") == "dynimizing") return false;
    return (backends = dynimized_backends(j)).size() >= 3;
  };
  ASSERT_TRUE(host.wait_for(settled, 120s)) << backends.size() << " backends dynimized\n"
                                            << host.status_json().dump() << host.log();
  std::size_t followers = 0;
  for (const auto& t : backends) {
    SCOPED_TRACE(t.dump());
    EXPECT_GE(t["group"].value("members", 0), 5) << "the postmaster, its helpers and four backends";
    EXPECT_NE(t["dynimized"].value("layout", "").find("by counts"), std::string::npos) << host.log();
    EXPECT_GE(t["dynimized"].value("functions_patched", 0), 20);
    if (t["group"].value("leader", false)) continue;
    EXPECT_EQ(t["dynimized"]["via"], "group plan");
    followers += t["dynimized"]["via"] == "group plan";
  }
  EXPECT_GE(followers, 2u) << "the leader's plan served the others";
  std::printf("postgres: %zu backends dynimized, %zu by the group's plan\n", backends.size(), followers);
  EXPECT_EQ(answers(), before) << "dynimized";

  // Inherit, don't repeat: the idle postmaster follows the plan last, and
  // every backend it forks from then on starts dynimized, in its cache.
  nlohmann::json postmaster;
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) { return !(postmaster = target_of(j, postmaster_)).is_null() &&
                                                                  postmaster.value("status", "") == "dynimized"; },
                            120s))
      << host.status_json().dump() << host.log();
  EXPECT_EQ(postmaster["dynimized"]["via"], "group plan") << postmaster.dump();
  EXPECT_TRUE(postmaster["group"].value("parent", false)) << postmaster.dump();
  const std::string cache = postmaster["dynimized"]["cache"].value("addr", "");
  std::set<pid_t> known;
  for (const auto& t : host.status_json().value("targets", nlohmann::json::array())) known.insert(t.value("pid", 0));
  pid_t sleeper = host.spawn({std::string(kPostgresBin) + "/psql", "-X", "-At", "-h", data_, "-p",
                              std::to_string(port_), "-U", "postgres", "-d", "postgres", "-c", "SELECT pg_sleep(5)"});
  nlohmann::json child;
  auto new_backend = [&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (!known.contains(t.value("pid", 0)) && t["group"].value("ppid", 0) == postmaster_ &&
          t.value("status", "") == "dynimized")
        return !(child = t).is_null();
    return false;
  };
  EXPECT_TRUE(host.wait_for(new_backend, 4s)) << host.status_json().dump() << host.log();
  if (!child.is_null()) {
    std::printf("postgres: a new connection's backend: %s\n", child.dump().c_str());
    EXPECT_EQ(child["dynimized"]["via"], "inherited") << child.dump();
    EXPECT_EQ(child["dynimized"]["cache"].value("addr", ""), cache) << "the postmaster's cache, by fork";
    EXPECT_EQ(child["dynimized"].value("patch_windows", -1), 0) << "no stop window of its own";
  }
  int sleeper_status = -1;
  ::waitpid(sleeper, &sleeper_status, 0);
  EXPECT_EQ(sleeper_status, 0) << "the new connection's query";
  EXPECT_EQ(answers(), before) << "in backends forked by the dynimized postmaster";

  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err << host.log();
  for (const auto& t : backends) EXPECT_EQ(host.state_of(t.value("pid", 0)), "undone") << t.dump();
  EXPECT_EQ(host.state_of(postmaster_), "undone");
  for (const auto& t : host.status_json().value("targets", nlohmann::json::array()))
    EXPECT_NE(t.value("state", ""), "dynimized") << "-undo reaches every member\n" << t.dump();
  EXPECT_EQ(answers(), before) << "undone";
  // Checked while pgbench still holds its connection: once pgbench is
  // stopped, its backends end too, and one may be gone before a later check.
  EXPECT_TRUE(DyniHost::alive(leader)) << "the dynimized backend ended\n" << host.log();
  ::kill(bench, SIGINT);
  ::waitpid(bench, nullptr, 0);
  std::ifstream in(bench_out);
  std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("progress:"), std::string::npos) << report;
  EXPECT_EQ(report.find("error"), std::string::npos) << report;
  EXPECT_EQ(report.find("aborted"), std::string::npos) << report;
  EXPECT_TRUE(DyniHost::alive(postmaster_)) << "postgres died";
  // A backend that crashed or exited with an error is logged by the
  // postmaster ("server process (PID N) was terminated by signal 11", "...
  // exited with exit code 1"), which then restarts every backend.
  std::ifstream log_in(host.dir() + "/postgres.log");
  std::string server_log((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(server_log.find("terminated by signal"), std::string::npos) << server_log;
  EXPECT_EQ(server_log.find("server process (PID"), std::string::npos) << server_log;
}

}  // namespace
}  // namespace dyni::test
