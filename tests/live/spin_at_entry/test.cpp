// Threads spinning at a patched entry (tests/live/spin_at_entry/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(SpinAtEntry, NoThreadIsCaughtInTheBytesThatChange) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  Scenario s(DYNI_LIVE_SPIN_AT_ENTRY, "dyni-spin");
  std::string expected = s.reference();
  ASSERT_FALSE(expected.empty());
  s.start();
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  ASSERT_TRUE(s.wait_for_more_lines(5)) << s.check_output(expected);
  for (int i = 0; i < 3; ++i) {
    RunResult undo = s.host.dyni({"-undo"});
    EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
    RunResult redo = s.host.dyni({"-redo"});
    EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
  }
  nlohmann::json d = s.facts()["dynimized"];
  std::printf("spin_at_entry: %s\n", d.dump().c_str());
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();
  // spin_park loops back to entry+2: its entry must never be patched.
  EXPECT_EQ(d["skipped"].value("entry left unpatched: branch target in the entry bytes", 0), 1) << d.dump();
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
