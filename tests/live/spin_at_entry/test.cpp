// Threads spinning at a patched entry (tests/live/spin_at_entry/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(SpinAtEntry, NoThreadIsCaughtInTheBytesThatChange) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_SPIN_AT_ENTRY, "dyni-spin");
  ASSERT_EQ(s.dynimize(), "");
  EXPECT_EQ(s.undo_redo(3), "");
  nlohmann::json d = s.dynimized_facts("spin_at_entry");
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();
  // spin_park loops back to entry+2: its entry must never be patched.
  EXPECT_EQ(d["skipped"].value("entry left unpatched: branch target in the entry bytes", 0), 1) << d.dump();
}

}  // namespace
}  // namespace dyni::test
