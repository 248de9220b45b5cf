// TargetTable: arrivals, departures, pid reuse, and state transitions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <tuple>

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

// A reading kept from an earlier scan (an idle process's: discovery reads
// it every fourth scan) is not a reading of now: put in the window at this
// time, it would count CPU used before it inside the window.
TEST(TargetTable, AReusedReadingIsNotAddedToTheBusyWindow) {
  TargetTable t;
  t.reconcile({proc(10, 1, 0)}, 0);
  DiscoveredProcess reused = proc(10, 1, 0);  // read at 0, while the process used hz / 2 since
  reused.stat.reused = true;
  t.reconcile({reused}, 1000);
  t.advance(kRule, true);
  EXPECT_EQ(t.snapshot()[0].observed_ms, 0) << "one reading only";
  EXPECT_EQ(t.snapshot()[0].cpu_percent, -1) << "not measured yet";
  t.reconcile({proc(10, 1, hz * 6 / 10)}, 2000);
  t.advance(kRule, true);
  EXPECT_EQ(t.snapshot()[0].observed_ms, 2000);
  EXPECT_NEAR(t.snapshot()[0].cpu_percent, 30.0, 1.0) << "over the two real readings, not 60 % from 1000 on";
  EXPECT_EQ(t.snapshot()[0].state, TargetState::Waiting);
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

// Process groups (process_group.h): the same executable file in the same
// mount namespace.
DiscoveredProcess member(pid_t pid, uint64_t ticks, uint64_t ino = 77, const std::string& ns = "mnt:[1]") {
  DiscoveredProcess p = proc(pid, pid, ticks, "postgres");
  p.mount_ns = ns;
  p.exe_dev = 0x801;
  p.exe_ino = ino;
  return p;
}

// Readings 1 s apart: each member's CPU is `percent` of a core.
void run_members(TargetTable& t, const std::vector<std::pair<pid_t, int>>& members, uint64_t ino = 77) {
  std::vector<DiscoveredProcess> first, second;
  for (auto [pid, percent] : members) {
    first.push_back(member(pid, 0, ino));
    second.push_back(member(pid, hz * static_cast<uint64_t>(percent) / 100, ino));
  }
  t.reconcile(first, 0);
  t.reconcile(second, 1000);
  t.advance(kRule, true);
}

TargetState state_of(const TargetTable& t, pid_t pid) {
  for (const Target& target : t.snapshot())
    if (target.pid == pid) return target.state;
  return TargetState::Failed;
}

TEST(TargetTable, AGroupBusyAsAWholeProfilesItsBusiestMemberAlone) {
  TargetTable t;
  run_members(t, {{10, 2}, {11, 30}, {12, 35}, {13, 25}});  // 92 % together, none at 50 % alone
  EXPECT_EQ(state_of(t, 12), TargetState::Profiling);
  for (pid_t other : {10, 11, 13}) EXPECT_EQ(state_of(t, other), TargetState::Waiting) << other;
  auto j = t.to_json();
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[2]["pid"], 12);
  EXPECT_EQ(j[2]["group"]["leader"], true);
  EXPECT_EQ(j[1]["group"]["leader"], false);
  EXPECT_EQ(j[0]["group"]["members"], 4);
  EXPECT_NEAR(j[0]["group"]["cpu_percent"].get<double>(), 92.0, 2.0);
  EXPECT_EQ(j[0]["group"]["key"], j[3]["group"]["key"]);
  EXPECT_EQ(j[0]["group"]["key"], "mnt:[1] 8:1 77");
  // One member at a time: the group stays busy, no second leader.
  t.reconcile({member(10, hz * 42 / 100), member(11, hz * 70 / 100), member(12, hz), member(13, hz * 65 / 100)}, 2000);
  t.advance(kRule, true);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 1u);
  // Once its member was dynimized (or failed), the group has its answer.
  ASSERT_TRUE(t.transition(12, 12, TargetState::Profiling, TargetState::Failed, "no"));
  t.advance(kRule, true);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u);
}

// A reading at `second` of members busy `percent` of a core since second 0, then a step.
void advance_at(TargetTable& t, const std::vector<std::pair<pid_t, int>>& members, int second) {
  std::vector<DiscoveredProcess> found;
  for (auto [pid, percent] : members)
    found.push_back(member(pid, hz * static_cast<uint64_t>(percent) * static_cast<uint64_t>(second) / 100));
  t.reconcile(found, second * 1000);
  t.advance(kRule, true);
}

pid_t follows_of(const TargetTable& t, pid_t pid) {
  for (const Target& target : t.snapshot())
    if (target.pid == pid) return target.follows;
  return -1;
}

void dynimized(TargetTable& t, pid_t pid) {
  ASSERT_TRUE(t.transition(pid, static_cast<uint64_t>(pid), TargetState::Profiling, TargetState::Dynimizing, "hot"));
  ASSERT_TRUE(t.transition(pid, static_cast<uint64_t>(pid), TargetState::Dynimizing, TargetState::Dynimized, "ok"));
}

TEST(TargetTable, AGroupWithAPlanDynimizesItsOtherBusyMembersByItOneAtATime) {
  TargetTable t;
  const std::vector<std::pair<pid_t, int>> members = {{10, 2}, {11, 30}, {12, 35}, {13, 25}, {14, 15}};
  advance_at(t, members, 0);
  advance_at(t, members, 1);
  ASSERT_EQ(state_of(t, 12), TargetState::Profiling);
  EXPECT_EQ(follows_of(t, 12), 0);
  dynimized(t, 12);
  advance_at(t, members, 2);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "no plan: the leader was the group's answer";
  const std::string key = t.snapshot().front().group;
  EXPECT_EQ(t.group_plan(key), nullptr);
  t.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{12, {}, {0x1000}, {}}));
  t.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{99, {}, {}, {}}));  // the first stays
  ASSERT_NE(t.group_plan(key), nullptr);
  EXPECT_EQ(t.group_plan(key)->counted_in, 12);
  // The busiest waiting member follows the plan; one at a time.
  advance_at(t, members, 3);
  EXPECT_EQ(state_of(t, 11), TargetState::Profiling);
  EXPECT_EQ(follows_of(t, 11), 12);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 1u);
  for (const auto& target : t.to_json()) {
    if (target["pid"] == 11) {
      EXPECT_EQ(target["group"]["follows"], 12) << target.dump();
    }
  }
  advance_at(t, members, 4);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 1u);
  dynimized(t, 11);
  advance_at(t, members, 5);
  EXPECT_EQ(state_of(t, 13), TargetState::Profiling);
  EXPECT_EQ(follows_of(t, 13), 12);
  // A member that failed stops the rest; the idle one is never chosen.
  ASSERT_TRUE(t.transition(13, 13, TargetState::Profiling, TargetState::Failed, "no"));
  advance_at(t, members, 6);
  EXPECT_EQ(state_of(t, 14), TargetState::Waiting);
  EXPECT_EQ(state_of(t, 10), TargetState::Waiting);
  // Once the group has no members, its plan goes.
  t.reconcile({}, 7000);
  t.advance(kRule, true);
  EXPECT_EQ(t.group_plan(key), nullptr);
}

// A reading at `second`: (pid, parent, percent of a core since second 0),
// each single-threaded but `threaded`.
void advance_family_at(TargetTable& t, const std::vector<std::tuple<pid_t, pid_t, int>>& members, int second,
                       pid_t threaded = 0) {
  std::vector<DiscoveredProcess> found;
  for (auto [pid, parent, percent] : members) {
    found.push_back(member(pid, hz * static_cast<uint64_t>(percent) * static_cast<uint64_t>(second) / 100));
    found.back().stat.ppid = parent;
    found.back().stat.threads = pid == threaded ? 4 : 1;
  }
  t.reconcile(found, second * 1000);
  t.advance(kRule, true);
}

TEST(TargetTable, AGroupsIdleParentFollowsThePlanFirstThenItsBusyMembers) {
  TargetTable t;
  // A postmaster (10, idle), a helper (11, idle) and three busy backends, all its children.
  const std::vector<std::tuple<pid_t, pid_t, int>> members = {
      {10, 1, 0}, {11, 10, 1}, {12, 10, 35}, {13, 10, 30}, {14, 10, 25}};
  advance_family_at(t, members, 0);
  advance_family_at(t, members, 1);
  ASSERT_EQ(state_of(t, 12), TargetState::Profiling) << "the busiest leads";
  EXPECT_EQ(state_of(t, 10), TargetState::Waiting) << "no plan yet: the parent waits";
  dynimized(t, 12);
  const std::string key = t.snapshot().front().group;
  t.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{12, {}, {0x1000}, {}}));
  // The parent first, idle as it is; not while the operator's -undo holds
  // the group. A child adopted undone (forked between the parent's record
  // and its patches) does not stop the group.
  ASSERT_TRUE(t.transition(11, 11, TargetState::Waiting, TargetState::Undone, "adopted, no live patch"));
  t.set_group_undone(key, true);
  advance_family_at(t, members, 2);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "dyni -undo undid the group";
  EXPECT_TRUE(t.group_undone(key));
  t.set_group_undone(key, false);
  advance_family_at(t, members, 3);
  EXPECT_EQ(state_of(t, 10), TargetState::Profiling);
  EXPECT_EQ(follows_of(t, 10), 12);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 1u) << "one at a time";
  dynimized(t, 10);
  // ... then the busy members, one at a time.
  for (pid_t busy : {13, 14}) {
    advance_family_at(t, members, busy - 9);
    ASSERT_EQ(state_of(t, busy), TargetState::Profiling) << busy;
    dynimized(t, busy);
  }
  advance_family_at(t, members, 6);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "never the idle helper, which forks nothing";
  for (const auto& target : t.to_json()) {
    EXPECT_EQ(target["group"]["parent"], target["pid"] == 10) << target.dump();
    EXPECT_EQ(target["group"]["ppid"], target["pid"] == 10 ? 1 : 10) << target.dump();
  }
}

TEST(TargetTable, AParentWaitsWithoutAPlanOrAfterAMemberFailedOrWhenThreaded) {
  TargetTable t;
  const std::vector<std::tuple<pid_t, pid_t, int>> members = {{10, 1, 0}, {12, 10, 35}, {13, 10, 30}};
  advance_family_at(t, members, 0);
  advance_family_at(t, members, 1);
  dynimized(t, 12);
  advance_family_at(t, members, 2);
  EXPECT_EQ(state_of(t, 10), TargetState::Waiting) << "without a plan the parent is never injected";
  const std::string key = t.snapshot().front().group;
  t.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{12, {}, {0x1000}, {}}));
  advance_family_at(t, members, 3, /*threaded=*/10);
  EXPECT_EQ(state_of(t, 13), TargetState::Profiling) << "the busy member follows";
  ASSERT_TRUE(t.transition(13, 13, TargetState::Profiling, TargetState::Failed, "its own reason"));
  advance_family_at(t, members, 4);
  EXPECT_EQ(state_of(t, 10), TargetState::Waiting) << "a member failed: the group's answer";
  // A multi-threaded parent is never injected (a thread of it could fork
  // while __register_frame holds the unwinder's lock in another).
  TargetTable mt;
  const std::vector<std::tuple<pid_t, pid_t, int>> pool = {{10, 1, 0}, {12, 10, 35}, {13, 10, 30}};
  advance_family_at(mt, pool, 0, 10);
  advance_family_at(mt, pool, 1, 10);
  dynimized(mt, 12);
  mt.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{12, {}, {0x1000}, {}}));
  advance_family_at(mt, pool, 2, 10);
  EXPECT_EQ(state_of(mt, 13), TargetState::Profiling) << "the parent, of four threads, is passed over";
  dynimized(mt, 13);
  advance_family_at(mt, pool, 3, 10);
  EXPECT_EQ(state_of(mt, 10), TargetState::Waiting) << "four threads";
  advance_family_at(mt, pool, 4);
  EXPECT_EQ(state_of(mt, 10), TargetState::Profiling) << "one thread";
  // A parent of another group's process is not this group's parent.
  TargetTable other;
  std::vector<DiscoveredProcess> found = {member(20, 0, 77), member(21, 0, 78)};
  found[1].stat.ppid = 20;
  other.reconcile(found, 0);
  for (const auto& target : other.to_json()) EXPECT_EQ(target["group"]["parent"], false) << target.dump();
}

TEST(TargetTable, AGroupWithAPlanWaitsWhileUndoneOrBelowTheThreshold) {
  TargetTable t;
  const std::vector<std::pair<pid_t, int>> members = {{11, 30}, {12, 35}, {13, 25}};
  advance_at(t, members, 0);
  advance_at(t, members, 1);
  dynimized(t, 12);
  const std::string key = t.snapshot().front().group;
  t.publish_group_plan(key, std::make_shared<GroupPlan>(GroupPlan{12, {}, {0x1000}, {}}));
  ASSERT_TRUE(t.transition(12, 12, TargetState::Dynimized, TargetState::Undone, "dyni -undo"));
  t.set_group_undone(key, true);
  advance_at(t, members, 2);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "the operator undid a member";
  ASSERT_TRUE(t.transition(12, 12, TargetState::Undone, TargetState::Dynimized, "dyni -redo"));
  t.set_group_undone(key, false);
  // From second 2 on, each member at 5 %: 15 % in all.
  for (int second : {3, 4}) {
    std::vector<DiscoveredProcess> found;
    for (auto [pid, percent] : members)
      found.push_back(member(pid, hz * static_cast<uint64_t>(percent * 2 + 5 * (second - 2)) / 100));
    t.reconcile(found, second * 1000);
    t.advance(kRule, true);
  }
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "a group below the threshold";
  for (const auto& target : t.to_json()) EXPECT_NEAR(target["group"]["cpu_percent"].get<double>(), 15.0, 2.0);
}

TEST(TargetTable, AGroupBelowTheThresholdOrOfSmallMembersWaits) {
  TargetTable below;
  run_members(below, {{10, 20}, {11, 20}});  // 40 %
  EXPECT_EQ(below.count_in(TargetState::Profiling), 0u);
  TargetTable small;  // 72 % in all, but no member does enough to be profiled alone
  run_members(small, {{10, 8}, {11, 8}, {12, 8}, {13, 8}, {14, 8}, {15, 8}, {16, 8}, {17, 8}, {18, 8}});
  EXPECT_EQ(small.count_in(TargetState::Profiling), 0u);
}

TEST(TargetTable, OtherFilesAndOtherNamespacesAreOtherGroups) {
  TargetTable t;
  t.reconcile({member(10, 0, 77), member(11, 0, 78), member(12, 0, 77, "mnt:[2]")}, 0);
  t.reconcile({member(10, hz * 30 / 100, 77), member(11, hz * 30 / 100, 78), member(12, hz * 30 / 100, 77, "mnt:[2]")},
              1000);
  t.advance(kRule, true);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "three groups of 30 % each";
  for (const auto& target : t.to_json()) EXPECT_EQ(target["group"]["members"], 1) << target.dump();
}

TEST(TargetTable, AMemberNotMeasuredOverAWholeWindowIsNeverChosenButCountsForItsGroup) {
  TargetTable t;
  const BusyRule two_seconds{50.0, 2000};
  t.reconcile({member(10, 0)}, 0);
  t.reconcile({member(10, hz * 30 / 100), member(11, 0), member(12, 0)}, 1000);
  t.reconcile({member(10, hz * 45 / 100), member(11, hz / 4), member(12, hz / 4)}, 1500);
  t.reconcile({member(10, hz * 60 / 100), member(11, hz / 2), member(12, hz / 2)}, 2000);  // 11, 12: one second of two
  t.advance(two_seconds, true);
  auto j = t.to_json();
  EXPECT_TRUE(j[1]["cpu_percent"].is_null());
  EXPECT_NEAR(j[1]["group"]["cpu_percent"].get<double>(), 80.0, 2.0) << "1.6 s of CPU in 2 s";
  EXPECT_EQ(t.count_in(TargetState::Profiling), 1u);
  EXPECT_EQ(state_of(t, 10), TargetState::Profiling) << "the one member measured over a whole window";
}

// pgbench -C: every backend lives a transaction, between two scans. The
// postmaster (10) and its helper (11) are all dynid sees; the backends' CPU
// is in the postmaster's reaped children's time. The parent leads, profiled
// with what it forks.
// Readings a second apart, from second `first` to `last`, of a parent (10),
// single-threaded, whose reaped children use `reaped` % of a core, and its
// child (11), `busy` %.
void run_parent_and_child(TargetTable& t, int reaped, int busy, int first = 0, int last = 3) {
  for (int second = first; second <= last; ++second) {
    const auto at = static_cast<uint64_t>(second);
    std::vector<DiscoveredProcess> found = {member(10, 0), member(11, hz * static_cast<uint64_t>(busy) * at / 100)};
    found[0].stat.children_ticks = hz * static_cast<uint64_t>(reaped) * at / 100;
    found[1].stat.ppid = 10;
    found[0].stat.threads = found[1].stat.threads = 1;
    t.reconcile(found, second * 1000);
    t.advance(kRule, true);
  }
}

TEST(TargetTable, AGroupOfShortLivedMembersIsLedByTheirParentWithItsDescendants) {
  TargetTable t;
  run_parent_and_child(t, 80, 0, 0, 2);
  EXPECT_EQ(t.count_in(TargetState::Profiling), 0u) << "busy for one window: a young member may yet be measured";
  run_parent_and_child(t, 80, 0, 3, 3);
  EXPECT_EQ(state_of(t, 10), TargetState::Profiling);
  EXPECT_EQ(state_of(t, 11), TargetState::Waiting);
  for (const auto& target : t.to_json()) {
    SCOPED_TRACE(target.dump());
    EXPECT_NEAR(target["group"]["cpu_percent"].get<double>(), 80.0, 2.0);
    EXPECT_EQ(target["group"]["leader"], target["pid"] == 10);
    EXPECT_EQ(target["group"]["with_descendants"], target["pid"] == 10);
  }
  // A member busy enough alone leads instead, without descendants.
  TargetTable busy;
  run_parent_and_child(busy, 50, 30);
  EXPECT_EQ(state_of(busy, 11), TargetState::Profiling);
  EXPECT_EQ(busy.to_json()[1]["group"]["with_descendants"], false);
}

}  // namespace
}  // namespace dyni
