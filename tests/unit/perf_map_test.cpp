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
// "removed" (true), "waits" (false), or the error.
std::string outcome(const Result<bool>& r) { return r ? (*r ? "removed" : "waits") : r.error().message(); }

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
  PerfMapHere map(pid_t pid, const std::string& text, int age = 120) {
    std::string path = dir + "/perf-" + std::to_string(pid) + ".map";
    std::ofstream(path) << text;
    age_of(path, age);
    struct stat st{};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return {path, st.st_dev, st.st_ino};
  }
  static void age_of(const std::string& path, int age) {
    timeval then[2];
    ::gettimeofday(&then[0], nullptr);
    then[0].tv_sec -= age;
    then[1] = then[0];
    EXPECT_EQ(::utimes(path.c_str(), then), 0);
  }

  std::string dir;
  const std::string dynis = "7f0000001000 40 f(int) [dyni]\n7f0000001040 10 g [dyni]\n";
};

TEST_F(DeadPerfMaps, PastTheLastKeptTheOldestGoes) {
  std::vector<pid_t> pids = free_pids(5);
  ASSERT_EQ(pids.size(), 5u);
  StalePerfMaps maps(2);
  std::vector<PerfMapHere> here;
  for (pid_t p : pids) here.push_back(map(p, dynis));
  EXPECT_EQ(maps.exited(pids[0], 1, 1, here[0]), 0u);
  EXPECT_EQ(maps.exited(pids[1], 1, 1, here[1]), 0u);
  EXPECT_EQ(maps.exited(pids[2], 1, 1, here[2]), 1u);
  EXPECT_FALSE(fs::exists(here[0].path)) << "the oldest of three, two kept";
  EXPECT_TRUE(fs::exists(here[1].path) && fs::exists(here[2].path));
  EXPECT_EQ(maps.exited(pids[3], 1, 1, {}), 0u) << "a map out of dynid's view is not counted";
  EXPECT_TRUE(fs::exists(here[1].path));
  // One written less than a minute ago waits, and goes at a later sweep.
  age_of(here[1].path, 5);
  EXPECT_EQ(maps.exited(pids[4], 1, 1, here[4]), 0u);
  EXPECT_TRUE(fs::exists(here[1].path)) << "too new: it waits";
  EXPECT_EQ(maps.sweep(), 0u);
  age_of(here[1].path, 120);
  EXPECT_EQ(maps.sweep(), 1u);
  EXPECT_FALSE(fs::exists(here[1].path));
  EXPECT_TRUE(fs::exists(here[2].path) && fs::exists(here[4].path));
}

// A restarted dynid finds the maps its predecessors left for processes
// that are gone: past the last kept, the oldest of dyni's alone go; a live
// process's map, another program's, and other files stay.
TEST_F(DeadPerfMaps, ARestartedDynidBoundsTheMapsLeftBeforeIt) {
  std::vector<pid_t> pids = free_pids(5);
  ASSERT_EQ(pids.size(), 5u);
  std::vector<PerfMapHere> dead;
  for (int k = 0; k < 4; ++k) dead.push_back(map(pids[k], dynis, 400 - 100 * k));  // pids[0] the oldest
  const PerfMapHere theirs = map(pids[4], "7f0000002000 10 jitted_by_the_process\n", 1000);
  const PerfMapHere live = map(::getpid(), dynis, 1000);
  std::ofstream(dir + "/perf-12x.map") << dynis;
  StalePerfMaps maps(2);
  EXPECT_EQ(maps.take_over_leftovers(dir), 2u);
  EXPECT_FALSE(fs::exists(dead[0].path) || fs::exists(dead[1].path)) << "the two oldest of dyni's";
  EXPECT_TRUE(fs::exists(dead[2].path) && fs::exists(dead[3].path)) << "the last two kept";
  EXPECT_TRUE(fs::exists(theirs.path)) << "not dyni's alone";
  EXPECT_TRUE(fs::exists(live.path)) << "a live process's";
  EXPECT_TRUE(fs::exists(dir + "/perf-12x.map"));
  EXPECT_EQ(maps.exited(pids[0], 1, 1, map(pids[0], dynis)), 1u) << "the bound goes on from there";
  EXPECT_FALSE(fs::exists(dead[2].path));
}

TEST_F(DeadPerfMaps, OnlyDynisOldMapsOfFreePidsGo) {
  std::vector<pid_t> pids = free_pids(5);
  ASSERT_EQ(pids.size(), 5u);
  const PerfMapHere plain = map(pids[3], dynis);
  EXPECT_EQ(outcome(remove_dead_perf_map(pids[3], plain)), "removed");
  EXPECT_FALSE(fs::exists(plain.path));
  EXPECT_EQ(outcome(remove_dead_perf_map(pids[3], plain)), "removed") << "none: nothing to do";
  const PerfMapHere mixed = map(pids[0], dynis + "7f0000002000 10 jitted_by_the_process\n");
  EXPECT_FALSE(remove_dead_perf_map(pids[0], mixed)) << "a line not dyni's";
  EXPECT_TRUE(fs::exists(mixed.path));
  const PerfMapHere fresh = map(pids[1], dynis, 5);
  EXPECT_EQ(outcome(remove_dead_perf_map(pids[1], fresh)), "waits") << "written seconds ago";
  EXPECT_TRUE(fs::exists(fresh.path));
  const PerfMapHere live = map(::getpid(), dynis);
  EXPECT_FALSE(remove_dead_perf_map(::getpid(), live)) << "its pid is a live process's";
  EXPECT_TRUE(fs::exists(live.path));
  // Another file at the name since (a new inode): not the map dyni wrote.
  const PerfMapHere before = map(pids[4], dynis);
  std::ofstream(before.path + ".new") << dynis;
  ASSERT_EQ(::rename((before.path + ".new").c_str(), before.path.c_str()), 0);
  age_of(before.path, 120);
  struct stat now{};
  ASSERT_EQ(::stat(before.path.c_str(), &now), 0);
  ASSERT_NE(now.st_ino, before.ino);
  EXPECT_FALSE(remove_dead_perf_map(pids[4], before)) << "another file now";
  EXPECT_TRUE(fs::exists(before.path));
  const std::string link = dir + "/perf-" + std::to_string(pids[2]) + ".map";
  ASSERT_EQ(::symlink(mixed.path.c_str(), link.c_str()), 0);
  struct stat st{};
  ASSERT_EQ(::stat(mixed.path.c_str(), &st), 0);
  EXPECT_FALSE(remove_dead_perf_map(pids[2], {link, st.st_dev, st.st_ino})) << "a symlink is never followed nor removed";
  EXPECT_TRUE(fs::is_symlink(link));
}

// A process in dynid's own mount namespace: its map is the very file at
// dynid's /tmp/perf-PID.map. None there: none seen.
TEST_F(DeadPerfMaps, AMapIsSeenHereOnlyAsTheSameFile) {
  EXPECT_TRUE(perf_map_seen_here(::getpid()).path.empty() || fs::exists(perf_map_seen_here(::getpid()).path));
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  const bool had = fs::exists(path);
  if (!had) std::ofstream(path) << dynis;
  PerfMapHere seen = perf_map_seen_here(::getpid());
  EXPECT_EQ(seen.path, path);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(seen.ino, st.st_ino);
  if (!had) {
    ::unlink(path.c_str());
    EXPECT_TRUE(perf_map_seen_here(::getpid()).path.empty());
  }
}

}  // namespace
}  // namespace dyni
