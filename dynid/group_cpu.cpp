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
  for (const Reading& r : members) {
    const auto key = std::make_pair(r.pid, r.start_time);
    const uint64_t term = r.ticks + r.children_ticks;
    auto it = last_.find(key);
    if (it == last_.end()) {
      // Born since the last scan: all it used is this window's.
      if (last_boot_ticks_ && r.start_time + 1 >= last_boot_ticks_) points_.back().ticks += static_cast<double>(term);
      now[key] = {term, now_ms};
    } else if (r.reused) {
      now[key] = it->second;
    } else {
      spread(static_cast<double>(term) - static_cast<double>(it->second.ticks), it->second.fresh_ms);
      now[key] = {term, now_ms};
    }
  }
  for (const auto& [key, term] : last_)
    if (!now.contains(key)) points_.back().ticks -= static_cast<double>(term.ticks);  // its reaper holds it now
  last_ = std::move(now);
  last_boot_ticks_ = boot_ticks;
  // Readings for at most ten minutes (the largest configurable window).
  while (points_.size() > 2 && now_ms - points_[1].ms >= 600000) points_.pop_front();
}

// Adds `ticks` used between `since_ms` and the newest point, evenly: each
// point after `since_ms` gets its share of the time up to it.
void GroupCpu::spread(double ticks, int64_t since_ms) {
  const int64_t end = points_.back().ms;
  for (Point& p : points_) {
    if (p.ms <= since_ms) continue;
    p.ticks += end > since_ms ? ticks * static_cast<double>(p.ms - since_ms) / static_cast<double>(end - since_ms) : ticks;
  }
}

double GroupCpu::percent(int64_t window_ms) const {
  if (points_.size() < 2) return -1;
  const Point& last = points_.back();
  const Point* start = nullptr;  // the newest point at least window_ms older than the last
  for (const Point& p : points_) {
    if (last.ms - p.ms < window_ms) break;
    start = &p;
  }
  if (!start || last.ms == start->ms) return -1;
  const double used = std::max(0.0, last.ticks - start->ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return 100.0 * used * 1000.0 / static_cast<double>(last.ms - start->ms);
}

uint64_t boot_ticks_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  const auto hz = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(ts.tv_sec) * hz + static_cast<uint64_t>(ts.tv_nsec) * hz / 1'000'000'000;
}

}  // namespace dyni
