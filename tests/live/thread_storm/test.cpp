// A thread storm (tests/live/thread_storm/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(ThreadStorm, ThreadsBornAndDyingThroughInjectionUndoAndRedo) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  Scenario s(DYNI_LIVE_THREAD_STORM, "dyni-storm");
  std::string expected = s.reference();
  ASSERT_FALSE(expected.empty());
  s.start();
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  nlohmann::json d = s.facts()["dynimized"];
  std::printf("thread_storm: %s\n", d.dump().c_str());
  ASSERT_TRUE(s.wait_for_more_lines(5)) << s.check_output(expected);
  EXPECT_GE(d.value("functions_patched", 0), 2) << d.dump();
  for (int i = 0; i < 5; ++i) {
    RunResult undo = s.host.dyni({"-undo"});
    EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
    RunResult redo = s.host.dyni({"-redo"});
    EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
  }
  EXPECT_EQ(s.host.state_of(s.pid()), "dynimized");
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
