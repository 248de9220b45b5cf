// `call reg` at a hot entry, with a thread parked in the callee
// (tests/live/call_reg_entry/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(CallRegEntry, TheEntryStaysAndTheParkedThreadReturnsSafely) {
  if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  Scenario s(DYNI_LIVE_CALL_REG_ENTRY, "dyni-callreg");
  std::string expected = s.reference();
  ASSERT_FALSE(expected.empty());
  s.start();
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << s.host.log();
  nlohmann::json d = s.facts()["dynimized"];
  std::printf("call_reg_entry: %s\n", d.dump().c_str());
  ASSERT_TRUE(s.wait_for_more_lines(5)) << s.check_output(expected);
  EXPECT_EQ(d["skipped"].value("entry left unpatched: call in the entry bytes", 0), 1) << d.dump();
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();
  EXPECT_EQ(s.host.dyni({"-undo"}).exit_code, 0);
  ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
  EXPECT_EQ(s.host.dyni({"-redo"}).exit_code, 0);
  ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(expected);
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
