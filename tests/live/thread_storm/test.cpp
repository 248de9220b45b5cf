// A thread storm (tests/live/thread_storm/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(ThreadStorm, ThreadsBornAndDyingThroughInjectionUndoAndRedo) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_THREAD_STORM, "dyni-storm");
  ASSERT_EQ(s.dynimize(), "");
  nlohmann::json d = s.dynimized_facts("thread_storm");
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();  // storm_work, which every thread runs
  EXPECT_EQ(s.undo_redo(5), "");
  EXPECT_EQ(s.host.state_of(s.pid()), "dynimized");
}

}  // namespace
}  // namespace dyni::test
