// BusyWindow: CPU percentage over a sliding window of tick readings.
#include <gtest/gtest.h>
#include <unistd.h>

#include "dynid/busy_window.h"
#include "dynid/group_cpu.h"

namespace dyni {
namespace {

const uint64_t hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));

TEST(BusyWindow, UnknownUntilTheWindowIsSpanned) {
  BusyWindow w;
  EXPECT_LT(w.percent(1000), 0);
  w.add(0, 0);
  EXPECT_LT(w.percent(1000), 0);
  w.add(500, hz / 2);
  EXPECT_LT(w.percent(1000), 0);
  w.add(1000, hz);
  EXPECT_NEAR(w.percent(1000), 100.0, 0.5);
}

TEST(BusyWindow, MeasuresOnlyTheLastWindow) {
  BusyWindow w;
  w.add(0, 0);
  w.add(1000, 2 * hz);    // two cores busy for the first second
  w.add(2000, 2 * hz);    // idle in the next
  EXPECT_NEAR(w.percent(1000), 0.0, 0.5);
  EXPECT_NEAR(w.percent(2000), 100.0, 0.5);
}

TEST(BusyWindow, ClearForgetsReadings) {
  BusyWindow w;
  w.add(0, 0);
  w.add(1000, hz);
  w.clear();
  EXPECT_LT(w.percent(1000), 0);
}

// GroupCpu (group_cpu.h). Readings one second apart; boot ticks = 1000 + hz * second.
GroupCpu::Reading reading(pid_t pid, uint64_t start, uint64_t ticks, uint64_t children = 0, bool reused = false,
                          pid_t ppid = 1) {
  return {pid, ppid, start, ticks, children, reused};
}
uint64_t boot_at(int second) { return 1000 + hz * static_cast<uint64_t>(second); }

TEST(GroupCpu, ChildrenBornAndReapedBetweenScansCountThroughTheirParent) {
  GroupCpu g;
  // An idle parent whose children, never seen, use 60 % of a core.
  for (int second = 0; second <= 2; ++second)
    g.add(second * 1000, boot_at(second), {reading(10, 5, 3, hz * 60 * static_cast<uint64_t>(second) / 100)});
  EXPECT_NEAR(g.percent(1000), 60.0, 1.0);
}

TEST(GroupCpu, AMemberReapedByItsParentMovesItsTotalWithoutAJump) {
  GroupCpu g;
  // A backend with 100 s of CPU behind it, busy 50 % now, exits at second 2
  // (half a second after its last reading: 0.5 s at 50 %) and is reaped.
  g.add(0, boot_at(0), {reading(10, 5, 0), reading(11, 6, hz * 100)});
  g.add(1000, boot_at(1), {reading(10, 5, 0), reading(11, 6, hz * 100 + hz / 2)});
  g.add(2000, boot_at(2), {reading(10, 5, 0, hz * 100 + hz / 2 + hz / 4)});
  EXPECT_NEAR(g.percent(1000), 25.0, 1.0) << "its last quarter second, not its life";
  EXPECT_NEAR(g.percent(2000), 37.5, 1.0);
}

TEST(GroupCpu, AnOldProcessFirstSeenAddsNothingANewOneAddsItsLife) {
  GroupCpu g;
  g.add(0, boot_at(0), {reading(10, 5, 0)});
  // Found at second 1: 11 started long ago (dynid restarted, or an exec
  // into the listed file), 12 since the last scan.
  g.add(1000, boot_at(1), {reading(10, 5, 0), reading(11, 6, hz * 500), reading(12, boot_at(0) + hz / 2, hz / 5)});
  EXPECT_NEAR(g.percent(1000), 20.0, 1.0);
}

TEST(GroupCpu, AMemberGoneUnreapedReadsLowNeverBelowZero) {
  GroupCpu g;
  g.add(0, boot_at(0), {reading(10, 5, hz * 3), reading(11, 6, hz * 3)});
  g.add(1000, boot_at(1), {reading(10, 5, hz * 3)});  // 11 gone, its parent not a member
  EXPECT_NEAR(g.percent(1000), 0.0, 0.5);
  g.add(2000, boot_at(2), {reading(10, 5, hz * 4)});
  g.add(3000, boot_at(3), {reading(10, 5, hz * 5)});
  EXPECT_NEAR(g.percent(1000), 100.0, 1.0) << "the next windows measure again";
}

TEST(GroupCpu, WhatAnIdleMemberUsedBetweenFreshReadingsIsSpreadOverThem) {
  GroupCpu g;
  g.add(0, boot_at(0), {reading(10, 5, 0)});
  g.add(1000, boot_at(1), {reading(10, 5, 0, 0, true)});  // idle at its last read: not read again
  g.add(2000, boot_at(2), {reading(10, 5, hz * 6 / 10)});
  EXPECT_NEAR(g.percent(1000), 30.0, 1.0) << "60 % of a core over two seconds, not one";
  EXPECT_NEAR(g.percent(2000), 30.0, 1.0);
}

// An idle parent read every few scans: its child with 60 s of CPU exits and
// is reaped between two of its readings. The child's total leaves the group
// only when the parent's next reading brings it back: no point reads low,
// so no window reads high.
TEST(GroupCpu, AChildReapedByAParentReadEarlierLeavesAtTheParentsNextReading) {
  GroupCpu g;
  g.add(0, boot_at(0), {reading(10, 5, 0), reading(11, 6, hz * 60, 0, false, 10)});
  g.add(1000, boot_at(1), {reading(10, 5, 0, 0, true), reading(11, 6, hz * 60 + hz / 2, 0, false, 10)});
  g.add(2000, boot_at(2), {reading(10, 5, 0, 0, true)});  // 11 gone, reaped
  EXPECT_LT(g.percent(1000), 30.0);
  g.add(3000, boot_at(3), {reading(10, 5, 0, hz * 60 + hz * 3 / 4)});
  EXPECT_LT(g.percent(1000), 30.0) << "not its 60 s";
  EXPECT_NEAR(g.percent(3000), 25.0, 1.0) << "0.75 s in 3 s";
}

// A child read just before it exits and its parent read just after it
// reaped it, in one scan: the child counts twice at that point, for one scan.
TEST(GroupCpu, ACountTwiceAtOnePointMustHoldTwoScansToCount) {
  GroupCpu g;
  g.add(0, boot_at(0), {reading(10, 5, 0), reading(11, 6, hz * 10, 0, false, 10)});
  g.add(1000, boot_at(1), {reading(10, 5, 0), reading(11, 6, hz * 10 + hz / 5, 0, false, 10)});
  g.add(2000, boot_at(2), {reading(10, 5, 0, hz * 10 + hz * 2 / 5), reading(11, 6, hz * 10 + hz * 2 / 5, 0, false, 10)});
  EXPECT_NEAR(g.percent(1000), 20.0, 1.0) << "the window ending a scan earlier";
  g.add(3000, boot_at(3), {reading(10, 5, 0, hz * 10 + hz * 2 / 5)});
  EXPECT_LT(g.percent(1000), 25.0);
}

}  // namespace
}  // namespace dyni
