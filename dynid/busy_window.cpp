// Sliding-window CPU percentage from cumulative tick readings.
#include "dynid/busy_window.h"

#include <unistd.h>

namespace dyni {
namespace {

double ticks_per_second() {
  static const double hz = [] {
    long v = ::sysconf(_SC_CLK_TCK);
    return v > 0 ? static_cast<double>(v) : 100.0;
  }();
  return hz;
}

}  // namespace

void BusyWindow::add(int64_t now_ms, uint64_t cpu_ticks) {
  samples_.push_back({now_ms, cpu_ticks});
  // Keep readings for at most ten minutes (the largest configurable window).
  while (samples_.size() > 2 && now_ms - samples_[1].ms >= 600000) samples_.pop_front();
}

double BusyWindow::percent(int64_t window_ms) const {
  if (samples_.size() < 2) return -1;
  const Sample& last = samples_.back();
  // The newest reading at least window_ms older than the last one.
  const Sample* start = nullptr;
  for (const Sample& s : samples_) {
    if (last.ms - s.ms < window_ms) break;
    start = &s;
  }
  if (!start || last.ms == start->ms) return -1;
  double seconds = static_cast<double>(last.ms - start->ms) / 1000.0;
  uint64_t used = last.ticks >= start->ticks ? last.ticks - start->ticks : 0;
  double cpu_seconds = static_cast<double>(used) / ticks_per_second();
  return 100.0 * cpu_seconds / seconds;
}

}  // namespace dyni
