// CPU use of a process over a sliding time window, from successive
// utime+stime readings: decides when a waiting target is busy enough to profile.
#pragma once

#include <cstdint>
#include <deque>

namespace dyni {

class BusyWindow {
 public:
  // Records a reading of cumulative CPU ticks at `now_ms` (monotonic).
  void add(int64_t now_ms, uint64_t cpu_ticks);
  // CPU use in percent of one core over the last `window_ms`, or -1 when the
  // readings do not span the window yet.
  double percent(int64_t window_ms) const;
  void clear() { samples_.clear(); }
  // How long the readings span: 0 after one (a process found at this scan).
  int64_t observed_ms() const { return samples_.size() < 2 ? 0 : samples_.back().ms - samples_.front().ms; }

 private:
  struct Sample {
    int64_t ms;
    uint64_t ticks;
  };
  std::deque<Sample> samples_;
};

}  // namespace dyni
