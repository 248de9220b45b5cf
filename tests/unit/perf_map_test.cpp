// dynid/perf_map.h: past the last kept maps of exited processes in dynid's
// own /tmp, the oldest goes, but only one that is dyni's alone, unchanged
// for a minute, of a pid that no process holds now.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "dynid/perf_map.h"

namespace dyni {
namespace {

namespace fs = std::filesystem;

// Pids that no process holds: from the top of the pid range down.
std::vector<pid_t> free_pids(std::size_t n) {
  std::ifstream in("/proc/sys/kernel/pid_max");
  long max = 32768;
  in >> max;
  std::vector<pid_t> out;
  for (pid_t p = static_cast<pid_t>(max - 1); p > 300 && out.size() < n; --p)
    if (::kill(p, 0) != 0 && errno == ESRCH) out.push_back(p);
  return out;
}

class DeadPerfMaps : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/dyni-perf-maps-XXXXXX";
    ASSERT_TRUE(::mkdtemp(name));
    dir = name;
  }
  void TearDown() override { fs::remove_all(dir); }

  // A map for `pid` holding `text`, last written `age` seconds ago.
  std::string map(pid_t pid, const std::string& text, int age = 120) {
    std::string path = dir + "/perf-" + std::to_string(pid) + ".map";
    std::ofstream(path) << text;
    timeval then[2];
    ::gettimeofday(&then[0], nullptr);
    then[0].tv_sec -= age;
    then[1] = then[0];
    EXPECT_EQ(::utimes(path.c_str(), then), 0);
    return path;
  }

  std::string dir;
  const std::string dynis = "7f0000001000 40 f(int) [dyni]\n7f0000001040 10 g [dyni]\n";
};

TEST_F(DeadPerfMaps, PastTheLastKeptTheOldestGoes) {
  std::vector<pid_t> pids = free_pids(4);
  ASSERT_EQ(pids.size(), 4u);
  StalePerfMaps maps(2);
  std::vector<std::string> paths;
  for (pid_t p : pids) paths.push_back(map(p, dynis));
  EXPECT_EQ(maps.exited(pids[0], 1, 1, paths[0]), 0u);
  EXPECT_EQ(maps.exited(pids[1], 1, 1, paths[1]), 0u);
  EXPECT_EQ(maps.exited(pids[2], 1, 1, paths[2]), 1u);
  EXPECT_FALSE(fs::exists(paths[0])) << "the oldest of three, two kept";
  EXPECT_TRUE(fs::exists(paths[1]) && fs::exists(paths[2]));
  EXPECT_EQ(maps.exited(pids[3], 1, 1, ""), 0u) << "a map out of dynid's view is not counted";
  EXPECT_TRUE(fs::exists(paths[1]));
}

TEST_F(DeadPerfMaps, OnlyDynisOldMapsOfFreePidsGo) {
  std::vector<pid_t> pids = free_pids(4);
  ASSERT_EQ(pids.size(), 4u);
  const std::string plain = map(pids[3], dynis);
  EXPECT_TRUE(remove_dead_perf_map(pids[3], plain));
  EXPECT_FALSE(fs::exists(plain));
  EXPECT_TRUE(remove_dead_perf_map(pids[3], plain)) << "none: nothing to do";
  const std::string mixed = map(pids[0], dynis + "7f0000002000 10 jitted_by_the_process\n");
  EXPECT_FALSE(remove_dead_perf_map(pids[0], mixed)) << "a line not dyni's";
  EXPECT_TRUE(fs::exists(mixed));
  const std::string fresh = map(pids[1], dynis, 5);
  EXPECT_FALSE(remove_dead_perf_map(pids[1], fresh)) << "written seconds ago";
  EXPECT_TRUE(fs::exists(fresh));
  const std::string live = map(::getpid(), dynis);
  EXPECT_FALSE(remove_dead_perf_map(::getpid(), live)) << "its pid is a live process's";
  EXPECT_TRUE(fs::exists(live));
  const std::string link = dir + "/perf-" + std::to_string(pids[2]) + ".map";
  ASSERT_EQ(::symlink(mixed.c_str(), link.c_str()), 0);
  EXPECT_FALSE(remove_dead_perf_map(pids[2], link)) << "a symlink is never followed nor removed";
  EXPECT_TRUE(fs::is_symlink(link));
}

}  // namespace
}  // namespace dyni
