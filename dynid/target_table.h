// The set of live targets and their states. The daemon's main loop feeds it
// /proc scans; the control socket reads snapshots of it.
//
// Invariant: one entry per live (pid, start_time); a reused pid replaces the
// entry of the process that had it.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "dynid/busy_window.h"
#include "dynid/discovery.h"
#include "dynid/group_cpu.h"
#include "dynid/process_group.h"
#include "dynid/target.h"

namespace dyni {

struct BusyRule {
  double threshold_percent;
  int window_ms;
};

class TargetTable {
 public:
  // Brings the table in line with one /proc scan: adds arrivals, drops
  // departures, replaces reused pids, records CPU readings.
  void reconcile(const std::vector<DiscoveredProcess>& found, int64_t now_mono_ms);

  // Moves targets along: the license gate, then waiting → profiling once busy,
  // on its own CPU or as its group's leader (process_group.h).
  void advance(const BusyRule& rule, bool licensed);

  // Moves the target (pid, start_time) from `from` to `to`; does nothing if it
  // is gone or no longer in `from` (e.g. the license went away meanwhile).
  // With `image` (Target::image), also nothing once the process exec'd.
  bool transition(pid_t pid, uint64_t start_time, TargetState from, TargetState to,
                  const std::string& reason, uint64_t image = 0);

  // The plan a member of group `key` was dynimized by (process_group.h),
  // for its other members. The first one published stays while the group
  // has members.
  void publish_group_plan(const std::string& key, std::shared_ptr<const GroupPlan> plan);
  std::shared_ptr<const GroupPlan> group_plan(const std::string& key) const;
  // dyni -undo undid a member of group `key` (true), or -redo redid one
  // (false). An undone group takes no follower, and its members adopted
  // dynimized since are to be undone too (Daemon::keep_groups_undone).
  void set_group_undone(const std::string& key, bool undone);
  bool group_undone(const std::string& key) const;

  std::vector<Target> snapshot() const;  // ordered by pid
  nlohmann::json to_json() const;
  // What plain -status prints of each: name, pid, state and status line.
  nlohmann::json brief_json() const;
  std::size_t count_in(TargetState state) const;

 private:
  void advance_groups(const BusyRule& rule);  // under mutex_
  void add_group_readings(const std::vector<DiscoveredProcess>& found, int64_t now_mono);  // under mutex_
  void set_state(Target& target, TargetState state, const std::string& why,
                 const std::string& reason = "");

  mutable std::mutex mutex_;
  std::map<pid_t, Target> targets_;
  // Each target's CPU readings (kept apart: every snapshot copies targets_).
  std::map<pid_t, BusyWindow> cpu_;
  std::map<std::string, GroupCpu> group_cpu_;          // by group key, its short-lived members' CPU included
  std::map<std::string, double> group_cpu_percent_;   // as advance() last measured it
  std::map<std::string, int64_t> group_busy_since_;   // when each busy group turned busy (monotonic ms)
  int64_t last_reading_ms_ = 0;                       // the last reconcile's time
  std::map<std::string, std::shared_ptr<const GroupPlan>> plans_;  // by group key
  std::set<std::string> undone_groups_;  // keys; dropped with the group
};

// Wall clock in unix milliseconds; monotonic milliseconds.
int64_t now_unix_ms();
int64_t now_mono_ms();
std::string format_unix_ms(int64_t unix_ms);  // ISO-8601 UTC

}  // namespace dyni
