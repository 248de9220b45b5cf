// Discovery: /proc parsing and matching of [exeList] entries, on real processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "dynid/discovery.h"

namespace dyni {
namespace {

TEST(ProcStat, ParsesCommWithParensAndSpaces) {
  std::string line = "1234 (evil) (x y) R 1 1234 1234 0 -1 4194304 100 0 0 0 "
                     "250 50 0 0 20 0 3 0 98765 1000000 200 18446744073709551615";
  auto st = parse_proc_stat(line);
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->pid, 1234);
  EXPECT_EQ(st->comm, "evil) (x y");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->cpu_ticks, 300u);
  EXPECT_EQ(st->start_time, 98765u);
}

TEST(ProcStat, RefusesTruncatedLines) {
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("12 (x"));
  EXPECT_FALSE(parse_proc_stat("12 (x) R 1 2 3"));
  EXPECT_FALSE(parse_proc_stat("abc (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"));
}

TEST(ProcStat, ReadsOwnProcess) {
  auto st = read_proc_stat("/proc", getpid());
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->pid, getpid());
  EXPECT_GT(st->start_time, 0u);
}

TEST(ExeListed, BasenamesAndFullPaths) {
  std::vector<std::string> list = {"mariadbd", "/opt/app/server"};
  EXPECT_TRUE(exe_listed(list, "/usr/sbin/mariadbd"));
  EXPECT_TRUE(exe_listed(list, "/var/lib/docker/overlay2/x/merged/usr/sbin/mariadbd"));
  EXPECT_TRUE(exe_listed(list, "/opt/app/server"));
  EXPECT_FALSE(exe_listed(list, "/usr/bin/server"));       // path entries match exactly
  EXPECT_FALSE(exe_listed(list, "/usr/sbin/mariadbd-safe"));
  EXPECT_FALSE(exe_listed(list, "/usr/sbin/mariadb"));
  EXPECT_FALSE(exe_listed({}, "/usr/sbin/mariadbd"));
}

// A copy of the idle test program under a unique name, run as a real process.
class DiscoverRealProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() / ("dyni-disc-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    exe = dir / name;
    std::filesystem::copy_file(DYNI_TEST_IDLE, exe);
    child = fork();
    if (child == 0) {
      execl(exe.c_str(), exe.c_str(), "20", nullptr);
      _exit(127);
    }
    usleep(100 * 1000);  // let it exec
  }
  void TearDown() override {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    std::filesystem::remove_all(dir);
  }
  const std::string name = "dyni-disc-target-" + std::to_string(getpid());
  std::filesystem::path dir, exe;
  pid_t child = -1;
};

TEST_F(DiscoverRealProcess, FindsItByBasenameAndByPath) {
  for (const std::string& entry : {name, exe.string()}) {
    auto found = discover({entry}, "/proc", getpid());
    ASSERT_EQ(found.size(), 1u) << entry;
    EXPECT_EQ(found[0].stat.pid, child);
    EXPECT_EQ(found[0].name, name);
    EXPECT_EQ(found[0].exe.path, exe.string());
    EXPECT_FALSE(found[0].exe.deleted);
    EXPECT_TRUE(found[0].mount_ns.starts_with("mnt:[")) << found[0].mount_ns;
  }
  EXPECT_TRUE(discover({"no-such-exe-name"}, "/proc", getpid()).empty());
}

TEST_F(DiscoverRealProcess, FindsItAfterItsFileIsDeleted) {
  std::filesystem::remove(exe);
  auto found = discover({name}, "/proc", getpid());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].exe.path, exe.string());
  EXPECT_TRUE(found[0].exe.deleted);
}

TEST_F(DiscoverRealProcess, SkipsSelfAndZombies) {
  EXPECT_TRUE(discover({name}, "/proc", child).empty());  // "self" is never a target
  kill(child, SIGKILL);
  usleep(100 * 1000);  // now a zombie until reaped
  EXPECT_TRUE(discover({name}, "/proc", getpid()).empty());
}

TEST(Discover, MissingProcRootFindsNothing) {
  EXPECT_TRUE(discover({"init"}, "/nonexistent-proc", getpid()).empty());
}

}  // namespace
}  // namespace dyni
