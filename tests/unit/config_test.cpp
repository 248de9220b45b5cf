// Config parsing: every accepted form and every refusal names file, line, reason.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config.h"
#include "common/printable.h"

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
      "scan_interval_ms = 200\nlog_file = /tmp/x.log\nlog_debug = yes\ndynimize = no\n"
      "[license]\npublic_key = /etc/dyni/k.pem\n",
      "test.conf");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->exe_list, (std::vector<std::string>{"mysqld", "mariadbd", "/opt/app/bin/srv"}));
  EXPECT_EQ(c->busy_threshold_percent, 75);
  EXPECT_EQ(c->busy_window_ms, 1500);
  EXPECT_EQ(c->scan_interval_ms, 200);
  EXPECT_EQ(c->log_file, "/tmp/x.log");
  EXPECT_TRUE(c->log_debug);
  EXPECT_FALSE(c->dynimize);
  EXPECT_EQ(c->license_public_key, "/etc/dyni/k.pem");
}

TEST(Config, DefaultsWhenOptionsAbsent) {
  auto c = parse_config("[exeList]\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_TRUE(c->exe_list.empty());
  EXPECT_EQ(c->busy_threshold_percent, 50);
  EXPECT_EQ(c->busy_window_ms, 3000);
  EXPECT_EQ(c->license_public_key, "");
  EXPECT_EQ(c->counting_duty_percent, 33);
}

TEST(Config, CountingDutyIsAShareOfTheTime) {
  auto c = parse_config("[exeList]\n[options]\ncounting_duty_percent = 100\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->counting_duty_percent, 100);
  EXPECT_EQ(error_of("[exeList]\n[options]\ncounting_duty_percent = 5\n"), "test.conf:3: '5' out of range [10, 100]");
  EXPECT_EQ(error_of("[exeList]\n[options]\ncounting_duty_percent = 101\n"),
            "test.conf:3: '101' out of range [10, 100]");
}

TEST(Config, LoopAlignmentAndUsdtCopiesAreChosenWithCare) {
  auto c = parse_config("[exeList]\n", "t");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->loop_alignment, 32);
  EXPECT_FALSE(c->copy_usdt_functions) << "probes keep firing unless asked";
  c = parse_config("[exeList]\n[options]\nloop_alignment = 0\ncopy_usdt_functions = true\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->loop_alignment, 0);
  EXPECT_TRUE(c->copy_usdt_functions);
  EXPECT_EQ(error_of("[exeList]\n[options]\nloop_alignment = 24\n"), "test.conf:3: '24' must be 0, 16, 32 or 64");
  EXPECT_EQ(error_of("[exeList]\n[options]\nloop_alignment = 128\n"), "test.conf:3: '128' out of range [0, 64]");
  EXPECT_NE(error_of("[exeList]\n[options]\ncopy_usdt_functions = maybe\n"), "");
  EXPECT_TRUE(c->all_hot_modules) << "every hot module unless asked otherwise (issue 22)";
  c = parse_config("[exeList]\n[options]\nall_hot_modules = false\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_FALSE(c->all_hot_modules);
  EXPECT_NE(error_of("[exeList]\n[options]\nall_hot_modules = 2\n"), "");
  EXPECT_EQ(c->min_module_percent, 1);
  c = parse_config("[exeList]\n[options]\nmin_module_percent = 5\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->min_module_percent, 5);
  EXPECT_EQ(error_of("[exeList]\n[options]\nmin_module_percent = 0\n"), "test.conf:3: '0' out of range [1, 100]");
  EXPECT_NE(error_of("[exeList]\n[options]\nmin_module_percent = 1.5\n"), "");
  EXPECT_EQ(c->small_cache_kib, 256) << "libc's few hot pages take no 2 MiB page unless asked";
  c = parse_config("[exeList]\n[options]\nsmall_cache_kib = 0\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->small_cache_kib, 0);
  EXPECT_EQ(error_of("[exeList]\n[options]\nsmall_cache_kib = 4096\n"), "test.conf:3: '4096' out of range [0, 2048]");
  EXPECT_NE(error_of("[exeList]\n[options]\nsmall_cache_kib = -1\n"), "");
}

TEST(Config, ShippedFileParsesAndListsCommonServers) {
  auto c = load_config(std::string(DYNI_SOURCE_DIR) + "/etc/dyni.conf");
  ASSERT_TRUE(c) << c.error().message();
  // Debian 12's names (apache2, php-fpm8.2), and those of other systems and
  // the official container images (httpd, php-fpm).
  for (const char* server : {"mysqld", "mariadbd", "postgres", "redis-server", "memcached", "apache2",
                             "httpd", "nginx", "php-fpm8.2", "php-fpm"})
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
  EXPECT_EQ(error_of("[exeList]\nmysqld\n\nmysqld\n"),
            "test.conf:4: 'mysqld' is listed twice (first on line 2)");
  EXPECT_EQ(error_of("x = 1\n[exeList]\n"), "test.conf:1: 'x' appears before any [section]");
  EXPECT_EQ(error_of("[exeList]\n[options]\njunk line\n"),
            "test.conf:3: syntax error (expected [section], name, or key = value)");
  EXPECT_EQ(error_of("[options]\nbusy_window_ms = 1000\n"),
            "test.conf: missing [exeList] section (it lists the executables to optimize)");
  EXPECT_EQ(error_of("; [exeList]\n"),
            "test.conf: missing [exeList] section (it lists the executables to optimize)");
}

TEST(Config, RefusesAKeyGivenTwiceNamingBothLines) {
  EXPECT_EQ(error_of("[exeList]\n[options]\nscan_interval_ms = 500\nscan_interval_ms = 600\n"),
            "test.conf:4: 'scan_interval_ms' is set twice (first on line 3)");
  // Also across two [options] sections, and in [license].
  EXPECT_EQ(error_of("[options]\nlog_debug = true\n[exeList]\nx\n[options]\nlog_debug = false\n"),
            "test.conf:6: 'log_debug' is set twice (first on line 2)");
  EXPECT_EQ(error_of("[exeList]\n[license]\npublic_key = /a.pem\npublic_key = /b.pem\n"),
            "test.conf:4: 'public_key' is set twice (first on line 3)");
  // An indented line is not inih's continuation of the value above (which
  // would set the key again from a line that names none): it is its own line.
  EXPECT_EQ(error_of("[exeList]\n[options]\nbusy_window_ms = 1000\n    2000\n"),
            "test.conf:4: syntax error (expected [section], name, or key = value)");
}

TEST(Config, RefusesExeNamesThatCannotBeFileNames) {
  EXPECT_EQ(error_of("[exeList]\nmysqld\n" + std::string("\0\xff\xfe", 3) + "\n"),
            "test.conf:3: contains a NUL byte");
  EXPECT_EQ(error_of("[exeList]\nmy" + std::string(1, '\0') + "sqld\n"),
            "test.conf:2: contains a NUL byte");
  EXPECT_EQ(error_of("[exeList]\nbad\x01name\n"),
            "test.conf:2: 'bad\\x01name' contains a control character");
  EXPECT_EQ(error_of("[exeList]\ntab\there\n"), "test.conf:2: 'tab\\x09here' contains a control character");
  EXPECT_EQ(error_of("[exeList]\n\xff\xfe\n"), "test.conf:2: '\\xff\\xfe' is not valid UTF-8");
  EXPECT_EQ(error_of("[exeList]\n..\n"), "test.conf:2: '..' is a directory name, not an executable");
  EXPECT_EQ(error_of("[exeList]\n/opt/app/\n"),
            "test.conf:2: '/opt/app/' ends in '/': it names a directory, not an executable");
  for (const char* path : {"/opt//app", "/opt/./app", "/opt/../app"})
    EXPECT_EQ(error_of(std::string("[exeList]\n") + path + "\n"),
              std::string("test.conf:2: '") + path +
                  "' is not a canonical path (no '//', '.' or '..'): it would never match")
        << path;
  // What a file name may be is accepted: UTF-8, dots, dashes, spaces inside.
  auto c = parse_config("[exeList]\nserveur-café\n.hidden\nphp-fpm8.2\nmy server\n/opt/a b/srv\n", "t");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->exe_list, (std::vector<std::string>{"serveur-café", ".hidden", "php-fpm8.2", "my server",
                                                    "/opt/a b/srv"}));
}

TEST(Printable, EscapesControlBytesAndNonUtf8) {
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays as it is
  EXPECT_EQ(printable("a\x1b[2Jb\x7f"), "a\\x1b[2Jb\\x7f");
  EXPECT_EQ(printable("caf\xe9"), "caf\\xe9");
  for (const char* bad : {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"})
    EXPECT_FALSE(valid_utf8(bad)) << printable(bad);
  EXPECT_TRUE(valid_utf8("\xf0\x9f\x98\x80 \xe2\x82\xac"));
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

// /dev/zero never ends and a FIFO's open waits for a writer: both used to
// hang dyni -start.
TEST(Config, RefusesWhatIsNotARegularFileWithoutReadingIt) {
  auto zero = load_config("/dev/zero");
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message(),
            "cannot read config /dev/zero: it is a character device, not a regular file");
  std::string fifo = std::filesystem::temp_directory_path() / ("dyni-conf-fifo-" + std::to_string(getpid()));
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = load_config(fifo);
  std::filesystem::remove(fifo);
  ASSERT_FALSE(from_fifo);
  EXPECT_EQ(from_fifo.error().message(), "cannot read config " + fifo + ": it is a FIFO, not a regular file");
  auto dir = load_config("/etc");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().message(), "cannot read config /etc: it is a directory, not a regular file");
}

TEST(Config, RefusesAFileLargerThanTheBound) {
  std::string path = std::filesystem::temp_directory_path() / ("dyni-conf-big-" + std::to_string(getpid()));
  std::ofstream(path) << "[exeList]\n" << std::string(kMaxConfigBytes, ';') << "\n";
  auto c = load_config(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message(), "cannot read config " + path + ": larger than 1048576 bytes");
}

TEST(Config, SurvivesBinaryGarbage) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>((i * 7919) & 0xff);
  auto c = parse_config(junk, "junk");
  EXPECT_FALSE(c);  // must fail cleanly, not crash
}

}  // namespace
}  // namespace dyni
