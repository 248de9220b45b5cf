// Calls that reach the copies (tests/live/call_sites/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "dynid/cache_scan.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"
#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

// What the target's cache records of `kind`, and how many of those hold
// dyni's bytes and how many the file's.
struct Held {
  std::size_t recorded = 0, ours = 0, original = 0;
};

Held held(pid_t pid, PatchKind kind) {
  Held h;
  auto maps = profiler::read_maps(pid);
  if (!maps) return h;
  for (const CacheRecord& r : find_cache_records(pid, *maps))
    for (const PatchRecord& p : r.patches) {
      if (p.kind != kind) continue;
      ++h.recorded;
      auto live = read_target(pid, p.addr, p.original.size());
      if (!live) continue;
      h.ours += std::equal(live->begin(), live->end(), p.replacement.begin());
      h.original += std::equal(live->begin(), live->end(), p.original.begin());
    }
  return h;
}

std::string describe(const Held& h) {
  return std::to_string(h.recorded) + " recorded, " + std::to_string(h.ours) + " re-pointed, " +
         std::to_string(h.original) + " original";
}

TEST(CallSites, DirectCallsFromOriginalCodeReachTheCopiesAcrossUndoRedoAndARestartedDynid) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_CALL_SITES, "dyni-callsites");
  ASSERT_EQ(s.dynimize(), "");
  ASSERT_NE(s.expected().find("pointers-hold"), std::string::npos) << s.expected();
  nlohmann::json d = s.dynimized_facts("call sites");
  EXPECT_GE(d.value("call_sites_repointed", 0), 1) << s.host.log();
  Held sites = held(s.pid(), PatchKind::CallSite);
  std::printf("call sites after injection: %s\n", describe(sites).c_str());
  ASSERT_GE(sites.recorded, 1u) << "cs_driver's call to cs_hash was not re-pointed:\n" << s.host.log();
  EXPECT_EQ(sites.ours, sites.recorded);

  // -undo puts every call site back with the entries; -redo re-points them.
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    RunResult undo = s.host.dyni({"-undo"});
    ASSERT_EQ(undo.exit_code, 0) << undo.out << undo.err;
    EXPECT_NE(undo.out.find("call sites"), std::string::npos) << undo.out;
    Held after_undo = held(s.pid(), PatchKind::CallSite), entries = held(s.pid(), PatchKind::Entry);
    EXPECT_EQ(after_undo.original, after_undo.recorded) << describe(after_undo);
    EXPECT_EQ(entries.original, entries.recorded) << describe(entries);
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(s.expected());
    RunResult redo = s.host.dyni({"-redo"});
    ASSERT_EQ(redo.exit_code, 0) << redo.out << redo.err;
    EXPECT_EQ(held(s.pid(), PatchKind::CallSite).ours, after_undo.recorded);
    ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(s.expected());
  }

  // A new dynid adopts the cache from its record, call sites included.
  ASSERT_EQ(s.host.dyni({"-stop"}).exit_code, 0);
  EXPECT_EQ(held(s.pid(), PatchKind::CallSite).ours, sites.recorded) << "-stop leaves the target optimized";
  RunResult start = s.host.dyni({"-start"});
  ASSERT_EQ(start.exit_code, 0) << start.out << start.err;
  ASSERT_TRUE(s.wait_for_state("dynimized")) << s.host.state_of(s.pid()) << "\n" << s.host.log();
  RunResult undo = s.host.dyni({"-undo"});
  ASSERT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  Held adopted = held(s.pid(), PatchKind::CallSite);
  EXPECT_EQ(adopted.original, sites.recorded) << "the new dynid's -undo: " << describe(adopted);
  ASSERT_TRUE(s.wait_for_more_lines(2)) << s.check_output(s.expected());
  RunResult redo = s.host.dyni({"-redo"});
  ASSERT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  EXPECT_EQ(held(s.pid(), PatchKind::CallSite).ours, sites.recorded);
  ASSERT_TRUE(s.wait_for_more_lines(3)) << s.check_output(s.expected());
  EXPECT_EQ(s.check_output(s.expected()), "");
}

}  // namespace
}  // namespace dyni::test
