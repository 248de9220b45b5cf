// Reconciling /proc scans with known targets and advancing their states.
#include "dynid/target_table.h"

#include <ctime>
#include <set>

#include "common/log.h"
#include "dynid/process_group.h"

namespace dyni {

int64_t now_unix_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int64_t now_mono_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string format_unix_ms(int64_t unix_ms) {
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[40];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(unix_ms % 1000));
}

namespace {

Target new_target(const DiscoveredProcess& p) {
  Target t;
  t.pid = p.stat.pid;
  t.ppid = p.stat.ppid;
  t.threads = p.stat.threads;
  t.start_time = p.stat.start_time;
  t.image = p.stat.image;
  t.name = p.name;
  t.exe = p.exe.path;
  t.exe_deleted = p.exe.deleted;
  t.mount_ns = p.mount_ns;
  t.matched_entry = p.matched_by.entry;
  t.matched_via = p.matched_by.via;
  t.group = group_key(p.mount_ns, p.exe_dev, p.exe_ino, p.exe.path);
  t.since_ms = now_unix_ms();
  return t;
}

}  // namespace

void TargetTable::reconcile(const std::vector<DiscoveredProcess>& found, int64_t now_mono) {
  std::lock_guard lock(mutex_);
  std::set<pid_t> seen;
  for (const auto& p : found) {
    seen.insert(p.stat.pid);
    auto it = targets_.find(p.stat.pid);
    if (it != targets_.end() && it->second.start_time != p.stat.start_time) {
      log::info("target pid {} ({}) exited; pid reused by a new {}", it->first, it->second.name,
                p.name);
      cpu_.erase(it->first);
      targets_.erase(it);
      it = targets_.end();
    } else if (it != targets_.end() && it->second.image != p.stat.image && it->second.image && p.stat.image) {
      // An exec: a new image, plain (every mapping dyni made is gone).
      log::info("target pid {} ({}) exec'd {}: a new target", it->first, it->second.name, p.exe.path);
      cpu_.erase(it->first);
      targets_.erase(it);
      it = targets_.end();
    }
    if (it == targets_.end()) {
      it = targets_.emplace(p.stat.pid, new_target(p)).first;
      log::info("target found: {} pid {} exe {}{}, listed as {} (via {})", p.name, p.stat.pid,
                p.exe.path, p.exe.deleted ? " (deleted)" : "", p.matched_by.entry, p.matched_by.via);
    }
    it->second.ppid = p.stat.ppid;  // a parent's death reparents it
    it->second.threads = p.stat.threads;
    it->second.exe_deleted = p.exe.deleted;
    it->second.matched_entry = p.matched_by.entry;  // a reload may change the entry that matches
    it->second.matched_via = p.matched_by.via;
    BusyWindow& cpu = cpu_[p.stat.pid];
    if (!p.stat.reused) cpu.add(now_mono, p.stat.cpu_ticks);  // an old reading at this time would inflate the window
    it->second.observed_ms = cpu.observed_ms();
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    log::info("target gone: {} pid {} (exited or no longer listed)", it->second.name, it->first);
    cpu_.erase(it->first);
    it = targets_.erase(it);
  }
  add_group_readings(found, now_mono);
  last_reading_ms_ = now_mono;
}

void TargetTable::add_group_readings(const std::vector<DiscoveredProcess>& found, int64_t now_mono) {
  std::map<std::string, std::vector<GroupCpu::Reading>> readings;
  for (const auto& p : found)
    if (auto t = targets_.find(p.stat.pid); t != targets_.end())
      readings[t->second.group].push_back(
          {p.stat.pid, p.stat.ppid, p.stat.start_time, p.stat.cpu_ticks, p.stat.children_ticks, p.stat.reused});
  const uint64_t boot_ticks = boot_ticks_now();
  for (const auto& [key, members] : readings) group_cpu_[key].add(now_mono, boot_ticks, members);
  std::erase_if(group_cpu_, [&](const auto& g) { return !readings.contains(g.first); });
}

void TargetTable::set_state(Target& target, TargetState state, const std::string& why,
                            const std::string& reason) {
  log::info("target {} pid {}: {} -> {} ({})", target.name, target.pid, state_name(target.state),
            state_name(state), why);
  target.state = state;
  target.reason = reason;
  target.since_ms = now_unix_ms();
}

void TargetTable::advance(const BusyRule& rule, bool licensed) {
  std::lock_guard lock(mutex_);
  for (auto& [pid, t] : targets_) {
    t.cpu_percent = cpu_[pid].percent(rule.window_ms);
    // A target being injected finishes (seconds): its lifecycle must keep what
    // it patched, for -undo.
    if (!licensed && (t.state == TargetState::Waiting || t.state == TargetState::Profiling))
      set_state(t, TargetState::Unlicensed, "no active license");
    if (licensed && t.state == TargetState::Unlicensed)
      set_state(t, TargetState::Waiting, "license active");
    // The daemon starts a lifecycle (dynid/lifecycle.h) for each profiling target.
    if (t.state == TargetState::Waiting && t.cpu_percent >= rule.threshold_percent) {
      t.with_descendants = t.as_parent = false;  // on its own CPU, not as a group's
      set_state(t, TargetState::Profiling,
                fmt::format("busy: {:.0f}% CPU over {} ms", t.cpu_percent, rule.window_ms));
    }
  }
  group_cpu_percent_.clear();
  for (const auto& [key, cpu] : group_cpu_) group_cpu_percent_[key] = cpu.percent(rule.window_ms);
  if (licensed) advance_groups(rule);
}

// A group busy as a whole gets one leader at a time (process_group.h).
void TargetTable::advance_groups(const BusyRule& rule) {
  std::vector<const Target*> all;
  for (const auto& [pid, t] : targets_) all.push_back(&t);
  const std::map<std::string, GroupSummary> groups = summarize_groups(all, group_cpu_percent_);
  std::erase_if(plans_, [&](const auto& plan) { return !groups.contains(plan.first); });  // the group is gone
  std::erase_if(undone_groups_, [&](const std::string& key) { return !groups.contains(key); });
  std::erase_if(group_busy_since_, [&](const auto& g) {
    auto group = groups.find(g.first);
    return group == groups.end() || group->second.cpu_percent < rule.threshold_percent;
  });
  for (const auto& [key, group] : groups) {
    if (auto plan = plans_.find(key); plan != plans_.end()) {
      if (undone_groups_.contains(key)) continue;  // the operator's answer
      pid_t next = group_follower_to_be(group, rule.threshold_percent);
      if (!next) continue;
      Target& t = targets_.at(next);
      t.follows = plan->second->counted_in;
      t.as_parent = next == group.waiting_parent;
      t.with_descendants = false;
      const std::string role = next == group.waiting_parent && (t.cpu_percent < kLeaderFloorPercent)
                                   ? "the parent of its members, idle: it follows the group's plan so that what it "
                                     "forks starts dynimized"
                                   : fmt::format("at {:.0f}%, it follows the group's plan", t.cpu_percent);
      set_state(t, TargetState::Profiling,
                fmt::format("busy as a group: {:.0f}% CPU over {} ms in {} processes of {}; {} (counted in pid {})",
                            group.cpu_percent, rule.window_ms, group.members, t.exe, role, t.follows));
      continue;
    }
    if (group.cpu_percent < rule.threshold_percent) continue;
    const int64_t busy_since = group_busy_since_.try_emplace(key, last_reading_ms_).first->second;
    const bool parent_may_lead = last_reading_ms_ - busy_since >= 2 * static_cast<int64_t>(rule.window_ms);
    pid_t leader = group_leader_to_be(group, rule.threshold_percent, parent_may_lead);
    if (!leader) continue;
    Target& t = targets_.at(leader);
    t.group_leader = true;
    t.follows = 0;
    t.with_descendants = t.as_parent = leader == group.waiting_parent;
    const std::string role =
        t.with_descendants && t.cpu_percent < kLeaderFloorPercent
            ? "no member does its share alone: the parent, profiled and counted with what it forks"
            : fmt::format("the busiest, at {:.0f}%{}", t.cpu_percent,
                          t.with_descendants ? ", the parent: profiled and counted with what it forks" : "");
    set_state(t, TargetState::Profiling,
              fmt::format("busy as a group: {:.0f}% CPU over {} ms in {} processes of {}; {}", group.cpu_percent,
                          rule.window_ms, group.members, t.exe, role));
  }
}

bool TargetTable::transition(pid_t pid, uint64_t start_time, TargetState from, TargetState to,
                             const std::string& reason, uint64_t image) {
  std::lock_guard lock(mutex_);
  auto it = targets_.find(pid);
  if (it == targets_.end() || it->second.start_time != start_time || it->second.state != from)
    return false;
  if (image && it->second.image && image != it->second.image) return false;  // exec'd since
  bool with_reason = to == TargetState::Failed || to == TargetState::Unsupported;
  set_state(it->second, to, reason, with_reason ? reason : "");
  return true;
}

void TargetTable::publish_group_plan(const std::string& key, std::shared_ptr<const GroupPlan> plan) {
  std::lock_guard lock(mutex_);
  plans_.try_emplace(key, std::move(plan));
}

std::shared_ptr<const GroupPlan> TargetTable::group_plan(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : it->second;
}

void TargetTable::set_group_undone(const std::string& key, bool undone) {
  std::lock_guard lock(mutex_);
  if (undone) undone_groups_.insert(key);
  else undone_groups_.erase(key);
}

bool TargetTable::group_undone(const std::string& key) const {
  std::lock_guard lock(mutex_);
  return undone_groups_.contains(key);
}

std::vector<Target> TargetTable::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<Target> out;
  for (const auto& [pid, t] : targets_) out.push_back(t);
  return out;
}

std::size_t TargetTable::count_in(TargetState state) const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [pid, t] : targets_) n += t.state == state;
  return n;
}

nlohmann::json TargetTable::brief_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const Target& t : snapshot())
    list.push_back({{"name", t.name}, {"pid", t.pid}, {"state", state_name(t.state)}, {"status", state_text(t)}});
  return list;
}

nlohmann::json TargetTable::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  const std::vector<Target> targets = snapshot();
  std::map<std::string, double> group_cpu;
  {
    std::lock_guard lock(mutex_);
    group_cpu = group_cpu_percent_;
  }
  std::vector<const Target*> all;
  for (const Target& t : targets) all.push_back(&t);
  const std::map<std::string, GroupSummary> groups = summarize_groups(all, group_cpu);
  const std::set<pid_t> parents = group_parents(all);
  for (const Target& t : targets) {
    const GroupSummary& group = groups.at(t.group);
    list.push_back({{"name", t.name},
                    {"pid", t.pid},
                    {"exe", t.exe},
                    {"exe_deleted", t.exe_deleted},
                    {"mount_namespace", t.mount_ns},
                    {"matched_by", {{"entry", t.matched_entry}, {"via", t.matched_via}}},
                    {"start_time_ticks", t.start_time},
                    {"state", state_name(t.state)},
                    {"reason", t.reason},
                    {"status", state_text(t)},
                    {"since", format_unix_ms(t.since_ms)},
                    {"cpu_percent", t.cpu_percent < 0 ? nlohmann::json(nullptr)
                                                      : nlohmann::json(t.cpu_percent)},
                    {"group", {{"key", t.group},
                               {"members", group.members},
                               {"cpu_percent", group.cpu_percent},
                               {"leader", t.group_leader},
                               {"with_descendants", t.with_descendants},  // profiled and counted with what it forks
                               {"parent", parents.contains(t.pid)},  // a member forked from it is in the group
                               {"ppid", t.ppid},
                               {"follows", t.follows ? nlohmann::json(t.follows) : nlohmann::json(nullptr)}}}});
  }
  return list;
}

}  // namespace dyni
