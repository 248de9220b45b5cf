// Process groups (issue 21): the processes that run one executable file in
// one mount namespace form a group for busy detection: a postgres cluster's
// postmaster and its backends, a pre-forked pool's parent and workers. Each
// of them alone may stay below the busy threshold while together they keep
// the host busy (postgres under pgbench: one backend per client).
//
// The busy rule (TargetTable::advance): a waiting target is busy on its own
// CPU, as ever, or it becomes its group's leader when
//   - the group's CPU (its measured members', summed, or as GroupCpu
//     measured it with its reaped children's, the larger) reaches the
//     threshold;
//   - no member of the group is in the pipeline or past it (profiling,
//     dynimizing, dynimized, undone, unsupported, failed): one member at a
//     time is profiled, and once one was, the group's answer is known;
//   - it is the group's busiest waiting member, with at least
//     kLeaderFloorPercent of a core of its own, or else the group's
//     waiting parent (below).
// A member that lived less than a busy window has no CPU reading yet
// (cpu_percent < 0) and is never chosen, so a backend that lives shorter
// than the window costs nothing; its CPU counts for the group's all the
// same, through its parent's reaped children's time (group_cpu.h).
//
// A leader's profile is the group's: it is sampled with the members that run
// its image at its addresses (forked from one parent, no exec since: the
// same ProcStat::image) and with what they all fork (profiler/sampler.h:
// Descendants); its counting copies count in it alone.
//
// When no member does the floor's share alone for two busy windows after
// the group turned busy (postgres under pgbench -C:
// a backend per transaction, each gone within milliseconds), the group's
// waiting parent leads instead (Target::with_descendants): its profile is
// of the processes it forks (profiler/sampler.h: Descendants), and its
// counting copies count where the work runs: the processes it forks while
// counting inherit the copies, and the counters are shared memory, which
// fork shares rather than copies (cache_mapping.h), so their counts add up
// in the parent's pages.
//
// Once a member was dynimized by counts, its plan (GroupPlan: the counts and
// the functions that ran) serves the group's other busy members: each is
// dynimized by it in turn, with no profile or counting phase of its own
// (a "follower"). The follower rule (group_follower_to_be): the group has a
// plan and is busy as a whole; no member is in the pipeline (one at a time);
// no member but the parent failed or is unsupported (the group's answer),
// and dyni -undo has not undone the group since the last -redo (the
// operator's: TargetTable::set_group_undone); the busiest waiting member
// has at least kLeaderFloorPercent of a core of its own.
//
// Inherit, don't repeat: the group's parent (a waiting, single-threaded
// member whose child is a member: postgres's postmaster, a pre-forked
// pool's parent) follows the plan first, idle as it is: one injection then
// serves every worker forked later, where busy members come and go (a pool
// that recycles its workers would otherwise keep it waiting). Every
// worker it forks afterwards starts with the parent's cache and patched
// entries, at the same address and in the same pages (fork), and is adopted
// from the cache's record (lifecycle.h: "inherited"), with no stop window
// of its own. A worker forked between the parent's windows is correct
// either way: before the entries are patched it runs the original code
// beside an unused cache (adopted as undone, which does not stop the
// group), after them the copies.
//
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dynid/target.h"
#include "jit/module_counts.h"

namespace dyni {

// A leader does enough of the group's work to be profiled alone: with
// fewer samples of its own, the hot set takes long to become stable.
constexpr double kLeaderFloorPercent = 10.0;

// "mnt:[4026531841] 254:1 1835012": the mount namespace and the executable
// file's device and inode; the path where the file could not be read.
std::string group_key(const std::string& mount_ns, uint64_t exe_dev, uint64_t exe_ino, const std::string& exe);

struct GroupSummary {
  std::size_t members = 0;
  double cpu_percent = 0;  // the group's CPU (summarize_groups), in percent of one core
  bool settled = false;    // a member is in the pipeline or past it
  bool in_pipeline = false;  // a member is profiling or dynimizing
  bool stopped = false;      // a member (not the parent) failed or is unsupported; or -undo undid the group
  pid_t busiest_waiting = 0;  // the waiting member with the most CPU (0: none measured)
  double busiest_cpu = -1;
  pid_t waiting_parent = 0;   // a waiting member that is the parent of another member (0: none)
};

// Every group of `targets`, by key (pure: the caller holds the table's lock).
// A group's CPU is its measured members' summed, or what `group_cpu`
// measured of it (group_cpu.h: short-lived members included), the larger.
std::map<std::string, GroupSummary> summarize_groups(const std::vector<const Target*>& targets,
                                                     const std::map<std::string, double>& group_cpu = {});

// The group's leader to be, or 0: the rule above. The parent may lead once
// the group has been busy for two windows (`parent_may_lead`): until then
// young members may still be measured (a pgbench -S backend lives as long
// as its connection, and the busiest of them counts the group's real work;
// an idle parent counts only what it forks meanwhile).
pid_t group_leader_to_be(const GroupSummary& group, double threshold_percent, bool parent_may_lead);

// The plan a member of a group was dynimized by, for the others. The
// group's members run one file (its key: device and inode), and counts are
// kept by link-time address: they hold in every member, wherever its
// executable is mapped. Each follower's injection checks its own memory as
// any injection does.
struct GroupPlan {
  pid_t counted_in = 0;           // the member whose counting copies counted
  jit::ModuleCounts counts;       // lays the copies out
  std::vector<uint64_t> hot;      // the functions that ran in its counting copies, or that its value sites saw called
  std::vector<uint64_t> callers;  // the functions its profile saw (their direct calls re-pointed)
  std::string module{};           // the library copied (InjectRequest::module), or "" for the executable
  // Each further module's plan (all_hot_modules, issue 22), counted in the
  // same phase: a follower injects each that it maps in the build counted,
  // after the first, as the member counted did.
  struct Further {
    std::string module;  // its path as the maps name it (InjectRequest::module)
    jit::ModuleCounts counts;
    std::vector<uint64_t> hot, callers;  // as above
  };
  std::vector<Further> more{};
};

// The members of `targets` whose child is a member of the same group.
std::set<pid_t> group_parents(const std::vector<const Target*>& targets);

// The next member to be dynimized by the group's plan, or 0: the follower
// rule above (a group with a plan): the parent first, then busy members.
pid_t group_follower_to_be(const GroupSummary& group, double threshold_percent);

}  // namespace dyni
