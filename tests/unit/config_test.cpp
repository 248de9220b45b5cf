// Config parsing: every accepted form and every refusal names file, line, reason.
#include <gtest/gtest.h>

#include "common/config.h"

namespace dyni {
namespace {

std::string error_of(const std::string& text) {
  auto c = parse_config(text, "test.conf");
  return c ? "" : c.error().message();
}

TEST(Config, ParsesExeListOptionsAndLicense) {
  auto c = parse_config(
      "; comment\n[exeList]\nmysqld\n  mariadbd ; inline comment\n/opt/app/bin/srv\n"
      "# another comment\n[options]\nbusy_threshold_percent = 75\nbusy_window_ms=1500\n"
      "scan_interval_ms = 200\nlog_file = /tmp/x.log\nlog_debug = yes\n"
      "[license]\npublic_key = /etc/dyni/k.pem\n",
      "test.conf");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->exe_list, (std::vector<std::string>{"mysqld", "mariadbd", "/opt/app/bin/srv"}));
  EXPECT_EQ(c->busy_threshold_percent, 75);
  EXPECT_EQ(c->busy_window_ms, 1500);
  EXPECT_EQ(c->scan_interval_ms, 200);
  EXPECT_EQ(c->log_file, "/tmp/x.log");
  EXPECT_TRUE(c->log_debug);
  EXPECT_EQ(c->license_public_key, "/etc/dyni/k.pem");
}

TEST(Config, DefaultsWhenOptionsAbsent) {
  auto c = parse_config("[exeList]\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_TRUE(c->exe_list.empty());
  EXPECT_EQ(c->busy_threshold_percent, 50);
  EXPECT_EQ(c->busy_window_ms, 3000);
  EXPECT_EQ(c->license_public_key, "");
}

TEST(Config, ShippedFileParsesAndListsCommonServers) {
  auto c = load_config(std::string(DYNI_SOURCE_DIR) + "/etc/dyni.conf");
  ASSERT_TRUE(c) << c.error().message();
  for (const char* server : {"mysqld", "mariadbd", "postgres", "redis-server", "memcached"})
    EXPECT_NE(std::find(c->exe_list.begin(), c->exe_list.end(), server), c->exe_list.end())
        << server;
}

TEST(Config, RefusesWithFileLineAndReason) {
  EXPECT_EQ(error_of("[exeList]\nmysqld\n[options]\nfoo = 1\n"),
            "test.conf:4: unknown key 'foo' in [options]");
  EXPECT_EQ(error_of("[exeList]\n[bogus]\nx = 1\n"), "test.conf:3: unknown section [bogus]");
  EXPECT_EQ(error_of("[exeList]\n[options]\nbusy_window_ms = soon\n"),
            "test.conf:3: 'soon' is not an integer");
  EXPECT_EQ(error_of("[exeList]\n[options]\nbusy_window_ms = 5\n"),
            "test.conf:3: '5' out of range [100, 600000]");
  EXPECT_EQ(error_of("[exeList]\n[options]\nlog_debug = maybe\n"),
            "test.conf:3: 'maybe' is not a boolean (true/false)");
  EXPECT_EQ(error_of("[exeList]\n[options]\nlog_file = relative.log\n"),
            "test.conf:3: 'relative.log' is not an absolute path");
  EXPECT_EQ(error_of("[exeList]\nmysqld = yes\n"),
            "test.conf:2: [exeList] entries are bare executable names or paths, not 'key = value'");
  EXPECT_EQ(error_of("[exeList]\nbin/mysqld\n"),
            "test.conf:2: 'bin/mysqld' must be a basename or an absolute path");
  EXPECT_EQ(error_of("[exeList]\nmysqld\n\nmysqld\n"), "test.conf:4: 'mysqld' is listed twice");
  EXPECT_EQ(error_of("x = 1\n[exeList]\n"), "test.conf:1: 'x' appears before any [section]");
  EXPECT_EQ(error_of("[exeList]\n[options]\njunk line\n"),
            "test.conf:3: syntax error (expected [section], name, or key = value)");
  EXPECT_EQ(error_of("[options]\nbusy_window_ms = 1000\n"),
            "test.conf: missing [exeList] section (it lists the executables to optimize)");
  EXPECT_EQ(error_of("; [exeList]\n"),
            "test.conf: missing [exeList] section (it lists the executables to optimize)");
}

TEST(Config, ReportsTheFirstOfSeveralErrors) {
  EXPECT_EQ(error_of("[exeList]\n[options]\nbad line\nfoo = 1\n"),
            "test.conf:3: syntax error (expected [section], name, or key = value)");
  EXPECT_EQ(error_of("[exeList]\n[options]\nfoo = 1\nbad line\n"),
            "test.conf:3: unknown key 'foo' in [options]");
}

TEST(Config, RefusesOverlongLines) {
  std::string text = "[exeList]\n" + std::string(5000, 'a') + "\n";
  EXPECT_EQ(error_of(text), "test.conf:2: line too long");
}

TEST(Config, MissingFileIsAnError) {
  auto c = load_config("/nonexistent/dyni.conf");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("cannot read config /nonexistent/dyni.conf"), std::string::npos);
}

TEST(Config, SurvivesBinaryGarbage) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>((i * 7919) & 0xff);
  auto c = parse_config(junk, "junk");
  EXPECT_FALSE(c);  // must fail cleanly, not crash
}

}  // namespace
}  // namespace dyni
