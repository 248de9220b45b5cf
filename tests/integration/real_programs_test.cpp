// Real programs from Debian, as they run in production (no special build),
// dynimized by a real dynid: python3, php-cli and gawk, each running a
// CPU-bound script that prints one checksum per round, the same in every
// round. Each must become dynimized and keep printing exactly what an
// undynimized run prints. The interpreter is a copy under a test-only name,
// so that the test's dynid never touches the host's own processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

struct Program {
  const char* name;         // gtest parameter name
  const char* executable;   // from Debian
  const char* package;      // to install it
  std::vector<std::string> args;  // ROUNDS is appended as given by the script's usage
};

std::string script(const std::string& file) { return std::string(DYNI_SOURCE_DIR) + "/tests/programs/scripts/" + file; }

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class RealPrograms : public ::testing::TestWithParam<Program> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
    if (::access(GetParam().executable, X_OK) != 0)
      GTEST_SKIP() << GetParam().executable << " is not installed (apt-get install " << GetParam().package << ")";
  }

  // Runs the program with `rounds` (0: forever) under `name`, its output to `out`.
  pid_t spawn(const std::string& name, const std::string& rounds, const std::string& out) {
    std::string exe = host.install_program(GetParam().executable, name);
    std::string command = "exec '" + exe + "'";
    for (std::string a : GetParam().args) {
      if (a == "ROUNDS") a = rounds;
      if (a == "rounds=ROUNDS") a = "rounds=" + rounds;
      command += " '" + a + "'";
    }
    return host.spawn({"/bin/sh", "-c", command + " > '" + out + "' 2>&1"});
  }

  DyniHost host;
};

TEST_P(RealPrograms, PrintsTheSameDynimized) {
  const std::string name = std::string("dyni-real-") + GetParam().name;
  // The undynimized answer, from a run nobody lists.
  const std::string reference_out = host.dir() + "/reference.out";
  pid_t reference = spawn("plain-" + std::string(GetParam().name), "3", reference_out);
  int status = 0;
  ASSERT_EQ(waitpid(reference, &status, 0), reference);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::vector<std::string> reference_lines = lines_of(reference_out);
  ASSERT_EQ(reference_lines.size(), 3u);
  ASSERT_EQ(reference_lines[0], reference_lines[2]) << "the script's rounds must agree";

  host.write_config({name}, std::string(kFastOptions) + "profile_min_samples = 800\nprofile_max_seconds = 20\n");
  host.license_this_host();
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  const std::string out = host.dir() + "/dynimized.out";
  pid_t target = spawn(name, "0", out);
  bool dynimized = host.wait_for_state(target, "dynimized", 40s);
  std::string state = host.state_of(target);
  // Rounds that ran after the code was patched.
  std::size_t at_patch = lines_of(out).size();
  for (int i = 0; i < 200 && lines_of(out).size() < at_patch + 5; ++i) std::this_thread::sleep_for(100ms);
  nlohmann::json status_json;
  for (const auto& t : host.status_json().value("targets", nlohmann::json::array()))
    if (t["pid"] == target) status_json = t;
  ::kill(target, SIGKILL);
  ::waitpid(target, &status, 0);
  ASSERT_TRUE(dynimized) << state << "\n" << host.log();
  std::printf("%s: %s\n", GetParam().name, status_json["dynimized"].dump().c_str());
  EXPECT_GE(status_json["dynimized"]["functions_patched"].get<int>(), 10) << status_json.dump();
  EXPECT_TRUE(status_json["dynimized"]["cache"]["huge_page_bytes"].is_number()) << "smaps names the cache";
  std::vector<std::string> lines = lines_of(out);
  ASSERT_GE(lines.size(), at_patch + 5) << "too few rounds after the patch";
  for (std::size_t i = 0; i + 1 < lines.size(); ++i)  // the last line may be cut by the kill
    ASSERT_EQ(lines[i], reference_lines[0]) << "round " << i << (i >= at_patch ? " (dynimized)" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Debian, RealPrograms,
    ::testing::Values(Program{"python3", "/usr/bin/python3.11", "python3.11", {"-u", script("work.py"), "ROUNDS"}},
                      Program{"php", "/usr/bin/php8.2", "php8.2-cli", {script("work.php"), "ROUNDS"}},
                      Program{"gawk", "/usr/bin/gawk", "gawk", {"-v", "rounds=ROUNDS", "-f", script("work.awk")}}),
    [](const ::testing::TestParamInfo<Program>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dyni::test
