// A signal-heavy target with sigaltstack (tests/live/signals/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(Signals, HandlersOnAnAltstackRunningHotCodeStayRight) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_SIGNALS, "dyni-signals");
  ASSERT_EQ(s.dynimize(), "");
  EXPECT_EQ(s.undo_redo(5), "");
  nlohmann::json d = s.dynimized_facts("signals");
  EXPECT_GE(d.value("functions_patched", 0), 2) << d.dump();
}

}  // namespace
}  // namespace dyni::test
