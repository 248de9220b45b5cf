// C++ exceptions through hot frames (tests/live/exceptions/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(Exceptions, ThrownCaughtRethrownAndBacktracedThroughCopies) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_EXCEPTIONS, "dyni-exceptions");
  ASSERT_EQ(s.dynimize(), "");
  nlohmann::json d = s.dynimized_facts("exceptions");
  EXPECT_EQ(d.value("frames_registered", "").rfind("yes", 0), 0u) << d.dump();
  // The functions that throw, clean up, catch and take the backtrace run as copies.
  EXPECT_GE(d.value("functions_patched", 0), 5) << d.dump();
  EXPECT_EQ(s.undo_redo(3), "");
}

}  // namespace
}  // namespace dyni::test
