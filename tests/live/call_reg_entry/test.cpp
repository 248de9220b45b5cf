// `call reg` at a hot entry, with a thread parked in the callee
// (tests/live/call_reg_entry/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

TEST(CallRegEntry, TheEntryStaysAndTheParkedThreadReturnsSafely) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_CALL_REG_ENTRY, "dyni-callreg");
  ASSERT_EQ(s.dynimize(), "");
  nlohmann::json d = s.dynimized_facts("call_reg_entry");
  EXPECT_EQ(d["skipped"].value("entry left unpatched: call in the entry bytes", 0), 1) << d.dump();
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();
  EXPECT_EQ(s.undo_redo(1), "");
}

}  // namespace
}  // namespace dyni::test
