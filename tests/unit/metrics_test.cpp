// dynid/metrics.h: a status becomes Prometheus text with HELP and TYPE once
// per metric, label values escaped, and only the facts a target has.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dynid/metrics.h"

namespace dyni {
namespace {

TEST(Metrics, StatusBecomesPrometheusText) {
  nlohmann::json status = {
      {"daemon", {{"cpu_seconds", 3.5}, {"rss_bytes", 1048576}}},
      {"license", {{"active", true}, {"expires_unix", 1000 + 86400 * 10}}},
      {"targets",
       {{{"name", "my\"d\\b\nx"}, {"pid", 42}, {"state", "dynimized"}, {"cpu_percent", 97.5},
         {"dynimized", {{"functions_copied", 670}, {"functions_patched", 660}, {"cache", {{"bytes", 2097152},
                        {"huge_page_bytes", nullptr}}}, {"longest_stop_ms", 4.8}, {"seconds_profiling", 10.0},
                        {"seconds_optimizing", 12.5}, {"undo_count", 2}, {"redo_count", 1}}}},
        {{"name", "idle"}, {"pid", 7}, {"state", "waiting"}, {"cpu_percent", nullptr}}}}};
  const std::string text = prometheus_metrics(status, 1000);
  const std::string busy = R"({name="my\"d\\b\nx",pid="42")";
  for (const std::string& line :
       {std::string("dyni_daemon_up 1\n"), std::string("dyni_daemon_cpu_seconds_total 3.5\n"),
        std::string("dyni_daemon_resident_bytes 1048576\n"), std::string("dyni_license_active 1\n"),
        std::string("dyni_license_days_left 10\n"), "dyni_target_state" + busy + ",state=\"dynimized\"} 1\n",
        std::string("dyni_target_state{name=\"idle\",pid=\"7\",state=\"waiting\"} 1\n"),
        "dyni_target_functions_optimized" + busy + "} 670\n", "dyni_target_cache_bytes" + busy + "} 2097152\n",
        "dyni_target_longest_stop_seconds" + busy + "} 0.0048\n",
        "dyni_target_seconds_to_dynimized" + busy + "} 22.5\n", "dyni_target_undo_total" + busy + "} 2\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  EXPECT_EQ(text.find("huge_page_bytes"), std::string::npos) << "no fact, no sample (and no HELP of none)";
  EXPECT_EQ(text.find("idle\",pid=\"7\"} "), std::string::npos) << "the waiting target has no cache facts";
  EXPECT_NE(text.find("# TYPE dyni_target_undo_total counter\n"), std::string::npos);
  EXPECT_EQ(text.find("\nx"), std::string::npos) << "a newline in a name is escaped, never raw";

  const std::string down = prometheus_metrics(nlohmann::json::object(), 0);
  EXPECT_NE(down.find("dyni_daemon_up 0\n"), std::string::npos) << down;
  EXPECT_EQ(down.find("dyni_target_"), std::string::npos) << down;
  EXPECT_EQ(down.find("dyni_license"), std::string::npos) << "unknown without a daemon, not inactive";
}

// With all_hot_modules, a target's functions, entries and cache bytes are
// every module's that did not fail (and every cache still mapped).
TEST(Metrics, EveryModulesCachesCount) {
  nlohmann::json status = {
      {"targets",
       {{{"name", "m"}, {"pid", 9}, {"state", "dynimized"},
         {"dynimized", {{"functions_copied", 600}, {"functions_patched", 590}, {"cache", {{"bytes", 2097152}}},
                        {"more_modules", {{{"module", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, {"functions_copied", 12},
                                           {"functions_patched", 10}, {"cache", {{"bytes", 2097152}}}},
                                          {{"module", "/usr/lib/x86_64-linux-gnu/libm.so.6"}, {"functions_copied", 3},
                                           {"functions_patched", 0}, {"cache", {{"bytes", 2097152}}},
                                           {"error", "no entry could be patched"}}}}}}}}}};
  const std::string text = prometheus_metrics(status, 1000);
  for (const std::string& line : {std::string("dyni_target_functions_optimized{name=\"m\",pid=\"9\"} 612\n"),
                                  std::string("dyni_target_entries_patched{name=\"m\",pid=\"9\"} 600\n"),
                                  std::string("dyni_target_cache_bytes{name=\"m\",pid=\"9\"} 6291456\n")})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
}

// The textfile's directory is node_exporter's user's: a link planted at the
// file's name is replaced, never followed; the file is 0644 whatever the
// umask; a directory that is a link is refused; no directory: nothing.
TEST(Metrics, TheTextfileNeverFollowsALinkAndIsReadable) {
  const std::string dir = std::filesystem::temp_directory_path() / ("dyni-metrics-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir + "/real");
  const std::string victim = dir + "/victim", file = dir + "/real/dyni.prom";
  std::ofstream(victim) << "victim\n";
  std::filesystem::create_symlink(victim, file);
  const mode_t old = ::umask(077);
  auto written = write_textfile(file, "dyni_daemon_up 1\n");
  ::umask(old);
  ASSERT_TRUE(written) << written.error().message();
  std::ifstream v(victim);
  std::string line;
  std::getline(v, line);
  EXPECT_EQ(line, "victim") << "written through the link";
  EXPECT_FALSE(std::filesystem::is_symlink(file));
  struct stat st{};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  std::filesystem::create_directory_symlink(dir + "/real", dir + "/linked");
  EXPECT_FALSE(write_textfile(dir + "/linked/dyni.prom", "x\n")) << "a directory that is a link";
  EXPECT_TRUE(write_textfile(dir + "/missing/dyni.prom", "x\n")) << "no directory: nothing to do";
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing"));
  remove_textfile(file);
  EXPECT_FALSE(std::filesystem::exists(file));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dyni
