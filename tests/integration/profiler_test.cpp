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
#include <set>
#include <fstream>
#include <thread>

#include "profiler/profile.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"
#include <fmt/format.h>

#include "tests/integration/dyni_host.h"

namespace dyni::profiler {
namespace {

using namespace std::chrono_literals;

// Samples `pid` for `duration`, refreshing threads and draining every 100 ms.
Profile record(pid_t pid, std::chrono::milliseconds duration, Symbolizer& symbolizer,
               SamplerStats* stats = nullptr, SamplerOptions options = {}) {
  auto sampler = Sampler::attach(pid, options);
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

class Profiler : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "sampling other processes needs root";
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

// hot_work<K> are leaves called from run() (frame pointers kept): callchains
// must attribute their samples to calls from that caller.
TEST_F(Profiler, CallerCalleeWeightsFromFramePointerCallchains) {
  pid_t pid = host.spawn({DYNI_TEST_HOT, "20", "2"});
  std::this_thread::sleep_for(300ms);
  auto symbolizer = Symbolizer::for_process(pid);
  ASSERT_TRUE(symbolizer) << symbolizer.error().message();
  Profile profile = record(pid, 2s, *symbolizer);
  uint64_t hot_samples = 0, hot_calls = 0;
  std::set<std::string> callers;
  for (const auto& [key, fp] : profile.functions())
    if (fp.function->name.find("hot_work") != std::string::npos) hot_samples += fp.samples;
  for (const auto& [edge, weight] : profile.calls()) {
    const auto& [caller, callee] = edge;
    const auto* callee_fn = symbolizer->modules()[callee.first].functions->find(callee.second);
    const auto* caller_fn = symbolizer->modules()[caller.first].functions->find(caller.second);
    ASSERT_TRUE(callee_fn && caller_fn);
    if (callee_fn->name.find("hot_work") == std::string::npos) continue;
    hot_calls += weight;
    callers.insert(elf::display_name(*caller_fn));
  }
  ASSERT_GT(hot_samples, 500u);
  EXPECT_GT(hot_calls, hot_samples * 8 / 10) << "most leaf samples carry their caller";
  EXPECT_TRUE(callers.count("run(std::chrono::time_point<std::chrono::_V2::steady_clock, "
                            "std::chrono::duration<long, std::ratio<1l, 1000000000l> > >)") ||
              callers.size() == 1)
      << ::testing::PrintToString(callers);
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

// The name as `perf report` prints it: no return type, no parameter list.
std::string perf_style_name(const std::string& name) {
  int depth = 0;
  std::size_t name_start = 0, params = name.size();
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '<') ++depth;
    else if (c == '>') --depth;
    else if (c == ' ' && depth == 0) name_start = i + 1;
    else if (c == '(' && depth == 0 && i > 0) {
      params = i;
      break;
    }
  }
  if (name_start > params) name_start = 0;
  return name.substr(name_start, params - name_start);
}

// Percent per symbol from `perf report`, only named symbols ("[.] name").
std::map<std::string, double> perf_report(const std::string& data, const std::string& out, pid_t pid) {
  std::map<std::string, double> theirs;
  if (system(("perf report -q -i " + data + " --pid " + std::to_string(pid) +
              " --sort sym --percent-limit 0 --stdio > " + out + " 2>/dev/null").c_str()) != 0)
    return theirs;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::size_t pct = line.find('%'), sym = line.find("[.] ");
    if (pct == std::string::npos || sym == std::string::npos) continue;
    std::string name = line.substr(sym + 4);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.starts_with("0x")) continue;  // an address perf could not name
    theirs[name] += std::stod(line.substr(0, pct));
  }
  return theirs;
}

// Samples `pid` with dynid's profiler (in `scope`) and with `perf record -p`
// at the same time for `seconds`; the top-20 named functions overlap in >= 18
// and agree within 2 percentage points.
void compare_with_perf(pid_t pid, int seconds, const std::string& dir, SamplerScope scope) {
  auto symbolizer = Symbolizer::for_process(pid);
  ASSERT_TRUE(symbolizer) << symbolizer.error().message();
  std::string data = dir + "/perf.data";
  std::string perf_cmd = "perf record -q -e cpu-clock:u -F 999 -o " + data + " -p " +
                         std::to_string(pid) + " -- sleep " + std::to_string(seconds) + " >/dev/null 2>&1";
  std::thread perf([&] { EXPECT_EQ(system(perf_cmd.c_str()), 0); });
  SamplerOptions options;
  options.scope = scope;
  Profile ours = record(pid, std::chrono::seconds(seconds), *symbolizer, nullptr, options);
  perf.join();
  std::map<std::string, double> theirs = perf_report(data, dir + "/report.txt", pid);
  ASSERT_GE(theirs.size(), 20u);
  std::vector<std::pair<std::string, double>> top_theirs(theirs.begin(), theirs.end());
  std::sort(top_theirs.begin(), top_theirs.end(), [](auto& a, auto& b) { return a.second > b.second; });
  top_theirs.resize(20);
  std::vector<HotFunction> top_ours;
  for (const HotFunction& h : ours.top(200))
    if (!h.name.starts_with("func_") && top_ours.size() < 20) top_ours.push_back(h);
  int overlap = 0;
  std::string table;
  for (const auto& h : top_ours) {
    std::string name = perf_style_name(h.name);
    table += fmt::format("{:6.2f}%  {}\n", h.percent, name);
    for (const auto& [their_name, their_pct] : top_theirs) {
      if (their_name != name) continue;
      ++overlap;
      EXPECT_NEAR(h.percent, their_pct, 2.0) << name;
    }
  }
  std::string their_table;
  for (const auto& [name, pct] : top_theirs) their_table += fmt::format("{:6.2f}%  {}\n", pct, name);
  EXPECT_GE(overlap, 18) << "top-20 sets differ; ours:\n" << table << "perf's:\n" << their_table;
}

TEST(PerfStyleName, StripsReturnTypeAndParameters) {
  EXPECT_EQ(perf_style_name("unsigned long hot_work<3>(unsigned long)"), "hot_work<3>");
  EXPECT_EQ(perf_style_name("do_command(THD*, bool)"), "do_command");
  EXPECT_EQ(perf_style_name("Item_func::val_int()"), "Item_func::val_int");
  EXPECT_EQ(perf_style_name("memcpy"), "memcpy");
}

TEST_F(Profiler, AgreesWithPerfRecord) {
  if (system("perf --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "perf not installed (apt-get install linux-perf)";
  pid_t pid = host.spawn({DYNI_TEST_HOT, "20", "2"});
  std::this_thread::sleep_for(300ms);
  compare_with_perf(pid, 4, host.dir(), SamplerScope::PerCpu);  // dynid's default scope
}

// A real mariadbd under sysbench oltp_read_only (bench/mariadb.sh), as in DESIGN.md §6.
TEST_F(Profiler, AgreesWithPerfRecordOnMariadbUnderSysbench) {
  for (const char* tool : {"perf --version", "mariadbd --version", "sysbench --version"})
    if (system((std::string(tool) + " >/dev/null 2>&1").c_str()) != 0)
      GTEST_SKIP() << "'" << tool << "' failed: install linux-perf, mariadb-server, sysbench";
  std::string script = std::string(DYNI_SOURCE_DIR) + "/bench/mariadb.sh";
  // Its own datadir and port, so a benchmark's server on 3307 does not collide.
  std::string env = "DYNI_MARIADB_DIR=" + host.dir() + "/mariadb DYNI_MARIADB_PORT=3317 ";
  ASSERT_EQ(system((env + script + " start >/dev/null && " + env + script + " prepare >/dev/null").c_str()), 0);
  std::ifstream pid_file(host.dir() + "/mariadb/mysqld.pid");
  pid_t pid = 0;
  pid_file >> pid;
  ASSERT_GT(pid, 0);
  std::thread load([&] { system((env + script + " run 14 2 >/dev/null").c_str()); });
  std::this_thread::sleep_for(3s);  // warm up
  // Like with like: per-thread events on both sides. (dynid's default per-CPU
  // scope agrees on mariadbd's own functions within ~0.5 points, but sees 1.5-2.5
  // points fewer samples in libc's recv/send wrappers than `perf record -a`
  // does: not understood yet, see the issue notes.)
  compare_with_perf(pid, 8, host.dir(), SamplerScope::PerThread);
  load.join();
  system((env + script + " stop >/dev/null").c_str());
  for (int i = 0; i < 100 && test::DyniHost::alive(pid); ++i) std::this_thread::sleep_for(100ms);
}

}  // namespace
}  // namespace dyni::profiler
