// The license as an operator meets it: dyni-token keygen/mint, -license=start,
// -license=status, -license=stop, and targets that show `unlicensed` without one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

class LicenseFlow : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
    // The README's three commands: keygen, trust the key in the config, mint.
    ASSERT_EQ(host.run({DYNI_TEST_TOKEN_TOOL, "keygen", "--dir", host.dir()}).exit_code, 0);
    host.write_config({"dyni-lic-target"});  // names license-public.pem now that it exists
  }
  std::string mint(const std::vector<std::string>& extra, const std::string& key = "") {
    std::vector<std::string> argv = {DYNI_TEST_TOKEN_TOOL, "mint", "--key",
                                     key.empty() ? host.dir() + "/license-private.pem" : key,
                                     "--subscription", "site-7", "--hosts", "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    RunResult r = host.run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  DyniHost host;
};

TEST_F(LicenseFlow, UnlicensedThenLicensedThenReleased) {
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  pid_t busy = host.spawn({host.install_program(DYNI_TEST_BUSY, "dyni-lic-target"), "40"});
  ASSERT_TRUE(host.wait_for_state(busy, "unlicensed")) << host.state_of(busy);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(host.state_of(busy), "unlicensed") << "a busy target is not profiled without a license";
  RunResult none = host.dyni({"-license=status"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "license no license (run dyni -license=start -token=<token>)\n");

  std::string token = mint({"--expires", "2099-12-31"});
  RunResult start = host.dyni({"-license=start", "-token=" + token});
  EXPECT_EQ(start.exit_code, 0) << start.err;
  EXPECT_EQ(start.out, "license active: subscription site-7, 4 hosts, expires 2099-12-31\n");
  ASSERT_TRUE(host.wait_for_state(busy, "profiling", 15s)) << host.state_of(busy);
  RunResult status = host.dyni({"-license=status"});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(status.out, "license active: subscription site-7, 4 hosts, expires 2099-12-31\n");
  EXPECT_NE(host.dyni({"-status"}).out.find("license: active: subscription site-7"), std::string::npos);

  RunResult wrong = host.dyni({"-license=stop", "-token=" + mint({"--expires", "2098-01-01"})});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_EQ(wrong.err, "dyni: that token is not the license active on this host\n");
  RunResult stop = host.dyni({"-license=stop", "-token=" + token});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_EQ(stop.out, "license released\n");
  ASSERT_TRUE(host.wait_for_state(busy, "unlicensed"));
}

TEST_F(LicenseFlow, LicenseWorksWithoutTheDaemon) {
  std::string token = mint({"--expires", "2099-12-31"});
  EXPECT_EQ(host.dyni({"-license=start", "-token=" + token}).exit_code, 0);
  EXPECT_EQ(host.dyni({"-license=status"}).exit_code, 0);
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  pid_t busy = host.spawn({host.install_program(DYNI_TEST_BUSY, "dyni-lic-target"), "30"});
  ASSERT_TRUE(host.wait_for_state(busy, "profiling", 15s)) << host.state_of(busy);
}

TEST_F(LicenseFlow, BadTokensGetPreciseErrors) {
  ASSERT_EQ(host.run({DYNI_TEST_TOKEN_TOOL, "keygen", "--dir", host.dir() + "/other"}).exit_code, 1)
      << "keygen into a missing directory must fail";
  std::filesystem::create_directories(host.dir() + "/other");
  ASSERT_EQ(host.run({DYNI_TEST_TOKEN_TOOL, "keygen", "--dir", host.dir() + "/other"}).exit_code, 0);
  struct Case {
    std::string token, error;
  };
  std::vector<Case> cases = {
      {mint({"--expires", "2099-01-01"}, host.dir() + "/other/license-private.pem"),
       "token signature is not valid for the trusted license key (forged or for another vendor)"},
      {mint({"--expires", "2020-01-01"}), "token expired on 2020-01-01"},
      {mint({"--expires", "2099-01-01", "--host", "ffffffffffffffffffffffffffffffff"}),
       "token is for host ffffffffffffffffffffffffffffffff, this host is "
       "0123456789abcdef0123456789abcdef"},
      {"not-a-token", "malformed token: does not start with 'dyni1.'"},
      {"dyni1.%%%.abc", "malformed token: not base64url"},
  };
  for (const auto& c : cases) {
    RunResult r = host.dyni({"-license=start", "-token=" + c.token});
    EXPECT_EQ(r.exit_code, 1) << c.error;
    EXPECT_EQ(r.err, "dyni: license not started: " + c.error + "\n");
  }
  EXPECT_EQ(host.dyni({"-license=status"}).exit_code, 1) << "no bad token may bind";
  // A token pinned to this host binds.
  std::string pinned = mint({"--expires", "2099-01-01", "--host", "0123456789abcdef0123456789abcdef"});
  EXPECT_EQ(host.dyni({"-license=start", "-token=" + pinned}).exit_code, 0);
}

TEST_F(LicenseFlow, MovedToAnotherHostTheBindingIsInvalid) {
  EXPECT_EQ(host.dyni({"-license=start", "-token=" + mint({"--expires", "2099-01-01"})}).exit_code, 0);
  std::ofstream(host.dir() + "/machine-id") << "fedcba9876543210fedcba9876543210\n";
  RunResult r = host.dyni({"-license=status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("bound on host 0123456789abcdef0123456789abcdef, this host is "
                       "fedcba9876543210fedcba9876543210"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dyni::test
