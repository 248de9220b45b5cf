// The profiler on live processes: every thread sampled, IPs symbolized, and the
// resulting profile checked against a program whose profile is known, and
// against `perf record` sampling the same run at the same time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <fstream>
#include <thread>

#include "profiler/profile.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"
#include "tests/integration/dyni_host.h"

namespace dyni::profiler {
namespace {

using namespace std::chrono_literals;

class Profiler : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "sampling other processes needs root";
  }
  // Samples `pid` for `duration`, refreshing threads and draining every 100 ms.
  Profile record(pid_t pid, std::chrono::milliseconds duration, Symbolizer& symbolizer,
                 SamplerStats* stats = nullptr) {
    auto sampler = Sampler::attach(pid, {});
    EXPECT_TRUE(sampler) << sampler.error().message();
    Profile profile(&symbolizer);
    if (!sampler) return profile;
    auto until = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(100ms);
      sampler->drain([&](const Sample& s) { profile.add(s); });
      if (!sampler->refresh_threads()) break;
    }
    sampler->drain([&](const Sample& s) { profile.add(s); });
    if (stats) *stats = sampler->stats();
    return profile;
  }
  test::DyniHost host;
};

double expected_percent(int k) { return 100.0 * (24 - k) / 300.0; }

TEST_F(Profiler, KnownProfileOfAMultiThreadedProgram) {
  pid_t pid = host.spawn({DYNI_TEST_HOT, "20", "2"});
  std::this_thread::sleep_for(300ms);
  auto symbolizer = Symbolizer::for_process(pid);
  ASSERT_TRUE(symbolizer) << symbolizer.error().message();
  SamplerStats stats;
  Profile profile = record(pid, 3s, *symbolizer, &stats);
  EXPECT_EQ(stats.threads, 2u);
  EXPECT_GT(profile.total(), 1500u) << "2 busy threads at ~1 kHz for 3 s";
  EXPECT_EQ(stats.lost, 0u);
  std::map<std::string, double> percent;
  for (const auto& h : profile.top(40)) percent[h.name] = h.percent;
  for (int k = 0; k < 24; k += 4) {
    std::string name = "unsigned long hot_work<" + std::to_string(k) + ">(unsigned long)";
    ASSERT_TRUE(percent.count(name)) << name << " missing from the profile";
    EXPECT_NEAR(percent[name], expected_percent(k), 2.0) << name;
  }
  auto top = profile.top(1);
  ASSERT_FALSE(top.empty());
  EXPECT_EQ(top[0].module, DYNI_TEST_HOT);
}

TEST_F(Profiler, NewThreadsAreSampledAndExitedTargetsEndCleanly) {
  pid_t pid = host.spawn({DYNI_TEST_HOT, "2", "4"});  // exits after 2 s
  std::this_thread::sleep_for(100ms);
  auto symbolizer = Symbolizer::for_process(pid);
  ASSERT_TRUE(symbolizer) << symbolizer.error().message();
  SamplerStats stats;
  Profile profile = record(pid, 4s, *symbolizer, &stats);
  EXPECT_GE(stats.threads_seen, 4u);
  EXPECT_GT(profile.total(), 500u);
}

// perf itself, sampling the same process at the same time, is the reference.
TEST_F(Profiler, AgreesWithPerfRecord) {
  if (system("perf --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "perf not installed (apt-get install linux-perf)";
  pid_t pid = host.spawn({DYNI_TEST_HOT, "20", "2"});
  std::this_thread::sleep_for(300ms);
  auto symbolizer = Symbolizer::for_process(pid);
  ASSERT_TRUE(symbolizer);
  std::string data = host.dir() + "/perf.data";
  std::string perf_cmd = "perf record -q -e cpu-clock:u -F 999 -o " + data + " -p " +
                         std::to_string(pid) + " -- sleep 4 >/dev/null 2>&1";
  std::thread perf([&] { EXPECT_EQ(system(perf_cmd.c_str()), 0); });
  Profile ours = record(pid, 4s, *symbolizer);
  perf.join();
  std::string report = host.dir() + "/report.txt";
  ASSERT_EQ(system(("perf report -q -i " + data + " --sort sym --percent-limit 0 --stdio > " + report +
                    " 2>/dev/null").c_str()), 0);
  std::map<std::string, double> theirs;
  std::ifstream in(report);
  for (std::string line; std::getline(in, line);) {
    // "    8.01%  [.] hot_work<0>"
    std::size_t pct = line.find('%'), sym = line.find("[.] ");
    if (pct == std::string::npos || sym == std::string::npos) continue;
    theirs[line.substr(sym + 4)] += std::stod(line.substr(0, pct));
  }
  ASSERT_GE(theirs.size(), 20u);
  // perf prints template names without the signature: compare on that form.
  auto short_name = [](const std::string& n) {
    std::size_t paren = n.rfind('(');
    std::string s = paren == std::string::npos ? n : n.substr(0, paren);
    std::size_t space = s.find(' ');
    return s.starts_with("unsigned long ") ? s.substr(14) : (space == std::string::npos ? s : s);
  };
  auto top_ours = ours.top(20);
  std::vector<std::pair<std::string, double>> top_theirs(theirs.begin(), theirs.end());
  std::sort(top_theirs.begin(), top_theirs.end(), [](auto& a, auto& b) { return a.second > b.second; });
  top_theirs.resize(20);
  int overlap = 0;
  for (const auto& h : top_ours) {
    std::string name = short_name(h.name);
    for (const auto& [their_name, their_pct] : top_theirs) {
      if (their_name != name) continue;
      ++overlap;
      EXPECT_NEAR(h.percent, their_pct, 2.0) << name;
    }
  }
  EXPECT_GE(overlap, 18) << "top-20 sets differ";
}

}  // namespace
}  // namespace dyni::profiler
