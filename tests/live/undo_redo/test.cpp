// 100 undo/redo rounds (tests/live/undo_redo/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "dynid/cache_scan.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"
#include "tests/live/scenario.h"

namespace dyni::test {
namespace {

// VmRSS of `pid`, in KiB.
long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

std::size_t mappings(pid_t pid) {
  auto maps = profiler::read_maps(pid);
  return maps ? maps->size() : 0;
}

// Entries recorded in the target's cache that hold their original bytes.
std::size_t original_entries(pid_t pid, std::size_t& recorded) {
  auto maps = profiler::read_maps(pid);
  std::size_t original = 0;
  recorded = 0;
  if (!maps) return 0;
  for (const CacheRecord& r : find_cache_records(pid, *maps))
    for (const PatchRecord& p : r.patches) {
      ++recorded;
      auto live = read_target(pid, p.addr, p.original.size());
      original += live && std::equal(live->begin(), live->end(), p.original.begin());
    }
  return original;
}

TEST(UndoRedo, AHundredRoundsKeepResultsRightAndMemoryFlat) {
  if (geteuid() != 0) GTEST_SKIP() << kNeedsRoot;
  Scenario s(DYNI_LIVE_UNDO_REDO, "dyni-undoredo");
  ASSERT_EQ(s.dynimize(), "");
  const std::string& expected = s.expected();
  pid_t dynid = s.host.daemon_pid();
  long target_rss = 0, dynid_rss = 0;
  std::size_t maps_before = 0;
  int redo_patched_all = 0;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round == 10) {  // after warm-up: libunwind's caches, the allocators' arenas
      target_rss = rss_kib(s.pid()), dynid_rss = rss_kib(dynid), maps_before = mappings(s.pid());
    }
    RunResult undo = s.host.dyni({"-undo"});
    ASSERT_EQ(undo.exit_code, 0) << undo.out << undo.err;
    std::size_t recorded = 0;
    EXPECT_EQ(original_entries(s.pid(), recorded), recorded) << "an entry kept dyni's jump after -undo";
    RunResult redo = s.host.dyni({"-redo"});
    ASSERT_EQ(redo.exit_code, 0) << redo.out << redo.err;
    redo_patched_all += original_entries(s.pid(), recorded) == 0;
    if (round % 20 == 19) {
      ASSERT_TRUE(s.wait_for_more_lines(1)) << s.check_output(expected);
    }
  }
  long target_growth = rss_kib(s.pid()) - target_rss, dynid_growth = rss_kib(dynid) - dynid_rss;
  std::printf("100 undo/redo rounds: redo patched every entry in %d; target RSS %+ld KiB, dynid RSS %+ld KiB, "
              "mappings %zu -> %zu\n", redo_patched_all, target_growth, dynid_growth, maps_before, mappings(s.pid()));
  EXPECT_EQ(mappings(s.pid()), maps_before) << "the target's mappings changed";
  EXPECT_LT(target_growth, 1024) << "the target's memory grew";
  EXPECT_LT(dynid_growth, 4096) << "dynid's memory grew";
  EXPECT_GE(redo_patched_all, 90) << "redo left entries unpatched in too many rounds";
  nlohmann::json d = s.facts()["dynimized"];
  EXPECT_EQ(d.value("undo_count", 0), 100);
  EXPECT_EQ(d.value("redo_count", 0), 100);
  EXPECT_EQ(s.check_output(expected), "");
}

}  // namespace
}  // namespace dyni::test
