// C++ exceptions through hot frames (tests/live/exceptions/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(Exceptions, ThrownCaughtRethrownAndBacktracedThroughCopies) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  Scenario s(DYNI_LIVE_EXCEPTIONS, "dyni-exceptions");
  std::string expected = s.reference();
  ASSERT_FALSE(expected.empty());
  s.start();
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  nlohmann::json d = s.facts()["dynimized"];
  std::printf("exceptions: %s\n", d.dump().c_str());
  ASSERT_TRUE(s.wait_for_more_lines(5)) << s.check_output(expected);
  EXPECT_EQ(d.value("frames_registered", "").rfind("yes", 0), 0u) << d.dump();
  // The functions that throw, clean up, catch and take the backtrace run as copies.
  EXPECT_GE(d.value("functions_patched", 0), 5) << d.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.host.dyni({"-undo"}).exit_code, 0);
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
    EXPECT_EQ(s.host.dyni({"-redo"}).exit_code, 0);
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
  }
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
