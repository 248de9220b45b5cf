// TargetTable: arrivals, departures, pid reuse, and state transitions.
#include <gtest/gtest.h>
#include <unistd.h>

#include "dynid/target_table.h"

namespace dyni {
namespace {

const uint64_t hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));

DiscoveredProcess proc(pid_t pid, uint64_t start, uint64_t ticks, const std::string& name = "db") {
  DiscoveredProcess p;
  p.stat.pid = pid;
  p.stat.start_time = start;
  p.stat.cpu_ticks = ticks;
  p.stat.state = 'S';
  p.name = name;
  p.exe.path = "/usr/sbin/" + name;
  return p;
}

const BusyRule kRule{50.0, 1000};

TEST(TargetTable, ArrivalsAndDepartures) {
  TargetTable t;
  t.reconcile({proc(10, 1, 0), proc(20, 2, 0, "other")}, 0);
  ASSERT_EQ(t.snapshot().size(), 2u);
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Waiting);
  t.reconcile({proc(20, 2, 0, "other")}, 500);
  ASSERT_EQ(t.snapshot().size(), 1u);
  EXPECT_EQ(t.snapshot()[0].pid, 20);
}

TEST(TargetTable, BusyTargetStartsProfilingIdleOneWaits) {
  TargetTable t;
  t.reconcile({proc(10, 1, 0), proc(11, 1, 0)}, 0);
  t.advance(kRule, true);
  t.reconcile({proc(10, 1, hz), proc(11, 1, hz / 10)}, 1000);  // 100% and 10% of a core
  t.advance(kRule, true);
  auto s = t.snapshot();
  EXPECT_EQ(s[0].state, TargetState::Profiling);
  EXPECT_NEAR(s[0].cpu_percent, 100.0, 1.0);
  EXPECT_EQ(s[1].state, TargetState::Waiting);
  EXPECT_EQ(state_text(s[1]), "waiting");
}

TEST(TargetTable, PidReuseStartsOver) {
  TargetTable t;
  t.reconcile({proc(10, 1, 0)}, 0);
  t.reconcile({proc(10, 1, hz)}, 1000);
  t.advance(kRule, true);
  ASSERT_EQ(t.snapshot()[0].state, TargetState::Profiling);
  t.reconcile({proc(10, 777, 0, "db")}, 1500);  // same pid, new process
  t.advance(kRule, true);
  auto s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].start_time, 777u);
  EXPECT_EQ(s[0].state, TargetState::Waiting);
}

TEST(TargetTable, AnExecStartsOverAndTheOldImagesTransitionsMissIt) {
  TargetTable t;
  auto with_image = [](DiscoveredProcess p, uint64_t image) {
    p.stat.image = image;
    return p;
  };
  t.reconcile({with_image(proc(10, 1, 0), 0xA)}, 0);
  t.reconcile({with_image(proc(10, 1, hz), 0xA)}, 1000);
  t.advance(kRule, true);
  ASSERT_EQ(t.snapshot()[0].state, TargetState::Profiling);
  t.reconcile({with_image(proc(10, 1, hz), 0xB)}, 1500);  // exec: same pid and start time
  auto s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].image, 0xBu);
  EXPECT_EQ(s[0].state, TargetState::Waiting);
  // A lifecycle of the old image cannot move the new one.
  EXPECT_FALSE(t.transition(10, 1, TargetState::Waiting, TargetState::Dynimized, "old", 0xA));
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Waiting);
  EXPECT_TRUE(t.transition(10, 1, TargetState::Waiting, TargetState::Failed, "new", 0xB));
  // A marker that cannot be read (0) is no exec.
  t.reconcile({with_image(proc(10, 1, hz), 0)}, 2000);
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Failed);
}

TEST(TargetTable, LicenseGate) {
  TargetTable t;
  t.reconcile({proc(10, 1, 0)}, 0);
  t.reconcile({proc(10, 1, hz)}, 1000);
  t.advance(kRule, false);
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Unlicensed);
  t.advance(kRule, true);  // license arrives: waiting, then busy → profiling
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Profiling);
  t.advance(kRule, false);  // license gone while profiling
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Unlicensed);
  EXPECT_EQ(t.count_in(TargetState::Unlicensed), 1u);
}

TEST(TargetTable, JsonCarriesTheFacts) {
  TargetTable t;
  t.reconcile({proc(10, 5, 0)}, 0);
  auto j = t.to_json();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["pid"], 10);
  EXPECT_EQ(j[0]["name"], "db");
  EXPECT_EQ(j[0]["exe"], "/usr/sbin/db");
  EXPECT_EQ(j[0]["state"], "waiting");
  EXPECT_EQ(j[0]["start_time_ticks"], 5);
  EXPECT_TRUE(j[0]["cpu_percent"].is_null());
  EXPECT_TRUE(j[0]["since"].get<std::string>().ends_with("Z"));
}

}  // namespace
}  // namespace dyni
