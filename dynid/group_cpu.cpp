// A group's CPU over time, its reaped children's included (group_cpu.h).
#include "dynid/group_cpu.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace dyni {

void GroupCpu::add(int64_t now_ms, uint64_t boot_ticks, const std::vector<Reading>& members) {
  const double before = points_.empty() ? 0 : points_.back().ticks;
  points_.push_back({now_ms, before});
  std::map<std::pair<pid_t, uint64_t>, Term> now;
  std::map<pid_t, std::pair<pid_t, uint64_t>> by_pid;  // this scan's members
  for (const Reading& r : members) by_pid[r.pid] = {r.pid, r.start_time};
  for (const Reading& r : members) {
    const auto key = std::make_pair(r.pid, r.start_time);
    const uint64_t term = r.ticks + r.children_ticks;
    auto it = last_.find(key);
    if (it == last_.end()) {
      // Born since the last scan: all it used is this window's.
      if (last_boot_ticks_ && r.start_time + 1 >= last_boot_ticks_) points_.back().ticks += static_cast<double>(term);
      now[key] = {r.ppid, term, now_ms, 0};
    } else if (r.reused) {
      now[key] = it->second;
    } else {
      const double used = static_cast<double>(term) - static_cast<double>(it->second.ticks) -
                          static_cast<double>(it->second.leaving);
      spread(used, it->second.fresh_ms);
      now[key] = {r.ppid, term, now_ms, 0};
    }
  }
  for (const auto& [key, gone] : last_) {
    if (now.contains(key)) continue;
    // Its total is its reaper's now: where that is a member read at an
    // earlier scan, it moves at the reaper's next fresh reading.
    auto parent = by_pid.find(gone.ppid);
    auto reaper = parent == by_pid.end() ? now.end() : now.find(parent->second);
    const double held = static_cast<double>(gone.ticks + gone.leaving);
    if (reaper != now.end() && reaper->second.fresh_ms < now_ms)
      reaper->second.leaving += gone.ticks + gone.leaving;
    else
      points_.back().ticks -= held;
  }
  last_ = std::move(now);
  last_boot_ticks_ = boot_ticks;
  // Readings for at most ten minutes (the largest configurable window).
  while (points_.size() > 2 && now_ms - points_[1].ms >= 600000) points_.pop_front();
}

// Adds `ticks` used between `since_ms` and the newest point, evenly: each
// point after `since_ms` gets its share of the time up to it.
void GroupCpu::spread(double ticks, int64_t since_ms) {
  const int64_t end = points_.back().ms;
  for (auto p = points_.rbegin(); p != points_.rend() && p->ms > since_ms; ++p)
    p->ticks += end > since_ms ? ticks * static_cast<double>(p->ms - since_ms) / static_cast<double>(end - since_ms) : ticks;
}

double GroupCpu::percent_ending_at(std::size_t end, int64_t window_ms) const {
  const Point& last = points_[end];
  const Point* start = nullptr;  // the newest point at least window_ms older than `last`
  for (std::size_t i = 0; i < end && last.ms - points_[i].ms >= window_ms; ++i) start = &points_[i];
  if (!start || last.ms == start->ms) return -1;
  const double used = std::max(0.0, last.ticks - start->ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return 100.0 * used * 1000.0 / static_cast<double>(last.ms - start->ms);
}

double GroupCpu::percent(int64_t window_ms) const {
  if (points_.size() < 2) return -1;
  const double last = percent_ending_at(points_.size() - 1, window_ms);
  const double before = points_.size() > 2 ? percent_ending_at(points_.size() - 2, window_ms) : -1;
  if (last < 0 || before < 0) return last;  // the first window: one end only
  return std::min(last, before);
}

uint64_t boot_ticks_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  const auto hz = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(ts.tv_sec) * hz + static_cast<uint64_t>(ts.tv_nsec) * hz / 1'000'000'000;
}

}  // namespace dyni
