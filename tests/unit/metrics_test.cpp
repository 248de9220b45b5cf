// dynid/metrics.h: a status becomes Prometheus text with HELP and TYPE once
// per metric, label values escaped, and only the facts a target has.
#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace dyni
