// The CPU a process group used (issue 21), its short-lived members' included:
// under `pgbench -C` each backend lives a few milliseconds, between two
// scans, and is never seen; its CPU shows only in its parent's reaped
// children's time (/proc/PID/stat cutime + cstime, ProcStat::children_ticks).
//
// The group's ticks at a scan are, over its members then alive,
//     G = sum of (own ticks + reaped children's ticks).
// A member that exits and is reaped by a member moves its whole total from
// its own term to its parent's: G goes on without a jump, and grows by the
// CPU it used since the last scan. A process born since the last scan adds
// all it used; one first seen that is older (dynid just started, a config
// reload, an exec into the listed file) adds nothing at first: its past is
// not this window's. A member gone without a member to reap it takes its
// total out of G: that window reads low, never high.
//
// An idle member's reading may be an earlier scan's (ProcStat::reused:
// discovery reads idle processes every few scans). What it used meanwhile
// shows at its next fresh reading, and is spread back evenly over the scans
// since its last one, so that a member turning busy never makes one window
// read high. A member gone whose parent's reading is such an earlier one
// leaves G only at that parent's next fresh reading, through the same
// spread: its total moves to its reaper in one step, never leaving a point
// low (a window that starts at a low point reads high).
//
// A window's end must hold at two scans in a row (percent() is the lower
// of the windows ending at the last two points): a child read just before
// it exits and is reaped by a parent read after it, in one scan, counts
// twice at that one point, and is taken out at the next.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

namespace dyni {

class GroupCpu {
 public:
  struct Reading {
    pid_t pid = 0;
    pid_t ppid = 0;
    uint64_t start_time = 0;      // clock ticks since boot
    uint64_t ticks = 0;           // own utime + stime
    uint64_t children_ticks = 0;  // reaped children's cutime + cstime
    bool reused = false;          // an earlier scan's reading (ProcStat::reused)
  };
  // One scan's readings of the group's members, at `now_ms` (monotonic);
  // `boot_ticks`: the scan's time in clock ticks since boot (start_time's clock).
  void add(int64_t now_ms, uint64_t boot_ticks, const std::vector<Reading>& members);
  // Percent of one core over the last `window_ms` (above: the lower of the
  // windows ending at the last two scans), or -1 until the readings span it.
  double percent(int64_t window_ms) const;

 private:
  struct Point {
    int64_t ms;
    double ticks;  // G's running sum
  };
  struct Term {
    pid_t ppid = 0;
    uint64_t ticks = 0;    // its term of G at its last fresh reading
    int64_t fresh_ms = 0;  // when that was
    uint64_t leaving = 0;  // gone children's terms, to leave G at its next fresh reading
  };
  void spread(double ticks, int64_t since_ms);
  double percent_ending_at(std::size_t end, int64_t window_ms) const;
  std::deque<Point> points_;  // the newest last
  std::map<std::pair<pid_t, uint64_t>, Term> last_;  // by (pid, start time)
  uint64_t last_boot_ticks_ = 0;
};

// Now in clock ticks since boot: the clock of ProcStat::start_time.
uint64_t boot_ticks_now();

}  // namespace dyni
