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
  // spin_park loops back to entry+2: its entry must never be patched. It is
  // skipped by the counting cache; its copy never runs (only its entry leads
  // there), so the optimized cache, made of what ran, leaves it out; the
  // reason the counting cache gave is carried into the final injection's.
  nlohmann::json c = s.counting_facts("spin_at_entry");
  const char* kind = "entry left unpatched: branch target in the entry bytes";
  EXPECT_EQ(c["skipped"].value(kind, 0), 1) << c.dump();
  EXPECT_EQ(d["skipped"].value(kind, 0), 1) << d.dump();
  EXPECT_EQ(c.value("phase", ""), "ended") << c.dump();
}

}  // namespace
}  // namespace dyni::test
