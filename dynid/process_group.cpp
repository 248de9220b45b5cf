// Process groups for busy detection (process_group.h).
#include "dynid/process_group.h"

#include <sys/sysmacros.h>

#include <fmt/format.h>

namespace dyni {

std::string group_key(const std::string& mount_ns, uint64_t exe_dev, uint64_t exe_ino, const std::string& exe) {
  if (exe_dev == 0 && exe_ino == 0) return mount_ns + " " + exe;
  return fmt::format("{} {}:{} {}", mount_ns, major(exe_dev), minor(exe_dev), exe_ino);
}

std::map<std::string, GroupSummary> summarize_groups(const std::vector<const Target*>& targets) {
  std::map<std::string, GroupSummary> groups;
  for (const Target* t : targets) {
    GroupSummary& g = groups[t->group];
    ++g.members;
    if (t->cpu_percent > 0) g.cpu_percent += t->cpu_percent;
    if (t->state != TargetState::Waiting && t->state != TargetState::Unlicensed) g.settled = true;
    if (t->state == TargetState::Profiling || t->state == TargetState::Dynimizing) g.in_pipeline = true;
    if (t->state == TargetState::Failed || t->state == TargetState::Unsupported || t->state == TargetState::Undone)
      g.stopped = true;
    if (t->state == TargetState::Waiting && t->cpu_percent > g.busiest_cpu) {
      g.busiest_waiting = t->pid;
      g.busiest_cpu = t->cpu_percent;
    }
  }
  return groups;
}

pid_t group_leader_to_be(const GroupSummary& group, double threshold_percent) {
  if (group.settled || group.cpu_percent < threshold_percent) return 0;
  if (group.busiest_waiting == 0 || group.busiest_cpu < kLeaderFloorPercent) return 0;
  return group.busiest_waiting;
}

pid_t group_follower_to_be(const GroupSummary& group, double threshold_percent) {
  if (group.in_pipeline || group.stopped || group.cpu_percent < threshold_percent) return 0;
  if (group.busiest_waiting == 0 || group.busiest_cpu < kLeaderFloorPercent) return 0;
  return group.busiest_waiting;
}

}  // namespace dyni
