// Process groups for busy detection (process_group.h).
#include "dynid/process_group.h"

#include <sys/sysmacros.h>

#include <fmt/format.h>

#include <algorithm>

namespace dyni {

std::string group_key(const std::string& mount_ns, uint64_t exe_dev, uint64_t exe_ino, const std::string& exe) {
  if (exe_dev == 0 && exe_ino == 0) return mount_ns + " " + exe;
  return fmt::format("{} {}:{} {}", mount_ns, major(exe_dev), minor(exe_dev), exe_ino);
}

std::set<pid_t> group_parents(const std::vector<const Target*>& targets) {
  std::map<pid_t, const std::string*> group_of;
  for (const Target* t : targets) group_of[t->pid] = &t->group;
  std::set<pid_t> parents;
  for (const Target* t : targets)
    if (auto parent = group_of.find(t->ppid); parent != group_of.end() && *parent->second == t->group)
      parents.insert(t->ppid);
  return parents;
}

std::map<std::string, GroupSummary> summarize_groups(const std::vector<const Target*>& targets,
                                                     const std::map<std::string, double>& group_cpu) {
  std::map<std::string, GroupSummary> groups;
  const std::set<pid_t> parents = group_parents(targets);
  for (const Target* t : targets) {
    GroupSummary& g = groups[t->group];
    ++g.members;
    if (t->cpu_percent > 0) g.cpu_percent += t->cpu_percent;
    // A parent that led and failed (its descendants gave no profile) leaves
    // the lead to a member busy enough alone.
    const bool failed = t->state == TargetState::Failed || t->state == TargetState::Unsupported;
    if (t->state != TargetState::Waiting && t->state != TargetState::Unlicensed && !(failed && parents.contains(t->pid)))
      g.settled = true;
    if (t->state == TargetState::Profiling || t->state == TargetState::Dynimizing) g.in_pipeline = true;
    // A parent's own failure (no clean thread for its remote call) is not
    // the plan's: the busy members born later may still follow it.
    if (failed && !parents.contains(t->pid)) g.stopped = true;
    if (t->state == TargetState::Waiting && t->cpu_percent > g.busiest_cpu) {
      g.busiest_waiting = t->pid;
      g.busiest_cpu = t->cpu_percent;
    }
    // Single-threaded only: while __register_frame runs in its one thread, no
    // other thread of it can fork with the unwinder's lock held (remote_call.h).
    if (t->state == TargetState::Waiting && parents.contains(t->pid) && t->threads == 1) g.waiting_parent = t->pid;
  }
  for (auto& [key, g] : groups)
    if (auto measured = group_cpu.find(key); measured != group_cpu.end()) g.cpu_percent = std::max(g.cpu_percent, measured->second);
  return groups;
}

pid_t group_leader_to_be(const GroupSummary& group, double threshold_percent, bool parent_may_lead) {
  if (group.settled || group.cpu_percent < threshold_percent) return 0;
  if (group.busiest_waiting != 0 && group.busiest_cpu >= kLeaderFloorPercent) return group.busiest_waiting;
  return parent_may_lead ? group.waiting_parent : 0;  // its descendants do the work (above)
}

pid_t group_follower_to_be(const GroupSummary& group, double threshold_percent) {
  if (group.in_pipeline || group.stopped || group.cpu_percent < threshold_percent) return 0;
  if (group.waiting_parent) return group.waiting_parent;  // idle, but what it forks inherits
  if (group.busiest_waiting == 0 || group.busiest_cpu < kLeaderFloorPercent) return 0;
  return group.busiest_waiting;
}

}  // namespace dyni
