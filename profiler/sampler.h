// perf_event sampling of every thread of one process, read from mmap'd ring
// buffers (no perf binary at run time). Uses `cycles` where the machine has a
// PMU, else the software `cpu-clock` event (VMs such as this project's own).
//
// Two scopes:
// - PerCpu (default): one event per CPU for the whole system, keeping the
//   samples whose pid is the target's. Every thread, old or new, is covered,
//   and the target's context switches cost nothing extra. (Measured here on
//   mariadbd under sysbench: per-thread events cost ~25-30 % of TPS, because
//   each of the target's many context switches then switches perf events too.)
// - PerThread (fallback when system-wide events are not allowed): one event
//   per thread, no `inherit`; threads are re-listed on every drain and new ones
//   get their own event, so each is counted once (with inherit, a thread created
//   by a sampled thread would be counted twice once re-listed). Threads living
//   less than one drain interval are missed.
//
// Descendants (SamplerOptions::descendants, PerCpu only): the samples of
// the processes the target forks from the moment the sampler is attached,
// and of theirs, are kept too, until each execs or exits: a postmaster's
// backends, born and gone between two drains (issue 21: one profile across
// a group). The CPU events then also carry the kernel's fork, exec (comm)
// and exit records, with the time of each sample and record; a drain sorts
// what it read from every CPU by time and follows the process tree as it
// goes (DescendantTree). The rings are read one after another, so a drain
// applies only what happened up to a moment taken before it read the first
// (its watermark, less a millisecond for a record being written): every
// record of that time is in the rings by then, wherever it lies; later
// ones wait for the next drain. Forked children run the parent's image at
// the same addresses, so their samples symbolize with the target's maps;
// so do `relatives`, processes known to run the target's image at its
// addresses (a group's members forked from it before the sampler came),
// followed with their descendants from the start.
//
// Cost: each sample is a timer interrupt in the sampled CPU. On bare metal or
// hardware-assisted VMs that is ~1-2 us; on this project's machines (a PVM
// nested guest) it is 35-52 us (bench/sample_cost.cpp), so 500 Hz per CPU
// costs mariadbd ~4 % of its TPS while profiling (bench/profiling_overhead.sh).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::profiler {

enum class SamplerScope { PerCpu, PerThread };

struct SamplerOptions {
  SamplerScope scope = SamplerScope::PerCpu;
  int frequency_hz = 999;
  bool callchains = true;      // frame-pointer callchains for caller→callee weights
  bool allow_hardware = true;  // try `cycles` before `cpu-clock`
  bool branch_stacks = true;   // with `cycles`, ask for LBR branch stacks (edge counts) too
  bool descendants = false;    // PerCpu: also the processes the target forks, until they exec (above)
  std::vector<pid_t> relatives;  // with descendants: sampled too, from the start (above)
};

// The processes descended from one root by fork, over time (pure: fed the
// kernel's records in time order). A process is one from its fork record's
// time until its exec or its exit.
class DescendantTree {
 public:
  // `root` and `relatives` are members from the start, until they exit or exec.
  explicit DescendantTree(pid_t root, const std::vector<pid_t>& relatives = {});
  void forked(pid_t child, pid_t parent, uint64_t time);
  void execd(pid_t pid, uint64_t time);    // runs another image from now on
  void exited(pid_t pid, uint64_t time);   // the process (its pid is free from now on)
  // Whether `pid` was the root or a descendant at `time`; nullopt when the
  // tree never heard of `pid` (its fork record may not have been read yet).
  std::optional<bool> member(pid_t pid, uint64_t time) const;
  // Forgets processes that ended before `time`.
  void forget_before(uint64_t time);
  std::size_t size() const { return spans_.size(); }

 private:
  static constexpr uint64_t kNever = ~uint64_t{0};
  struct Span {
    uint64_t from = 0, to = kNever;
  };
  void end(pid_t pid, uint64_t time);
  pid_t root_;
  std::multimap<pid_t, Span> spans_;  // a pid reused within the tree has two
};

// A taken branch from the PMU's last-branch record.
struct Branch {
  uint64_t from = 0, to = 0;
};

struct Sample {
  uint64_t ip = 0;
  pid_t tid = 0;
  std::vector<uint64_t> callchain;  // user frames, innermost first, excluding ip itself
  std::vector<Branch> branches;     // most recent first (LBR), when the event has them
};

// What a PERF_RECORD_SAMPLE carries after its header, in this order:
// ip, pid/tid, [time], [callchain], [branch stack].
struct SampleFormat {
  bool callchain = false;
  bool branch_stack = false;
  bool time = false;
};

// Parses the body of one PERF_RECORD_SAMPLE (after perf_event_header); pid
// comes back in `pid`. Nothing is trusted: a short record is refused.
std::optional<Sample> parse_sample(std::span<const uint8_t> body, const SampleFormat& format, pid_t& pid,
                                   uint64_t* time = nullptr);

struct SamplerStats {
  uint64_t samples = 0;
  uint64_t lost = 0;          // samples the kernel dropped (ring buffer full)
  std::size_t threads = 0;    // threads currently sampled
  std::size_t threads_seen = 0;
  std::size_t processes_seen = 0;  // processes with samples: the target, and its descendants when followed
};

class Sampler {
 public:
  static Result<Sampler> attach(pid_t pid, const SamplerOptions& options);
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) = delete;
  ~Sampler();

  // Opens events for threads that appeared, closes those of threads that left.
  // Fails only when the process itself is gone.
  Status refresh_threads();
  // Hands every sample waiting in the ring buffers to `sink`.
  void drain(const std::function<void(const Sample&)>& sink);
  // Closes every event: sampling (and its interrupts) ends; stats stay.
  void stop();

  const std::string& event_name() const { return event_name_; }
  bool has_branch_stacks() const { return format_.branch_stack; }
  SamplerScope scope() const { return scope_; }
  const SamplerStats& stats() const { return stats_; }
  pid_t pid() const { return pid_; }

 private:
  struct ThreadEvent {
    int fd = -1;
    void* ring = nullptr;
  };
  Sampler(pid_t pid, SamplerOptions options) : pid_(pid), options_(options) {}
  Result<ThreadEvent> open_event(pid_t tid, int cpu);
  Status open_cpus();
  // A record read from a ring: its header's type and misc, and its body.
  using RecordSink = std::function<void(uint32_t type, uint16_t misc, std::span<const uint8_t> body)>;
  // What a drain following descendants read, applied in time order.
  struct TimedRecord {
    enum Kind { Fork, Exec, Exit, SampleOf } kind;
    uint64_t time = 0;
    pid_t pid = 0, ppid = 0;
    Sample sample;
  };
  void read_timed(std::vector<TimedRecord>& out);
  void drain_one(ThreadEvent& e, const RecordSink& sink);
  void drain_descendants(const std::function<void(const Sample&)>& sink);
  void take(const Sample& s, pid_t pid, const std::function<void(const Sample&)>& sink);
  void close_thread(ThreadEvent& e);

  pid_t pid_;
  SamplerOptions options_;
  uint32_t event_type_ = 0;
  uint64_t event_config_ = 0;
  std::string event_name_;
  SampleFormat format_;
  SamplerScope scope_ = SamplerScope::PerCpu;
  std::map<pid_t, ThreadEvent> threads_;  // PerThread: by tid; PerCpu: by cpu
  std::set<pid_t> tids_seen_, pids_seen_;
  SamplerStats stats_;
  // Descendants: the tree, and the records past the last drain's watermark.
  std::optional<DescendantTree> tree_;
  std::vector<TimedRecord> later_;
};

// The kernel's limit on sampling frequency (perf_event_max_sample_rate).
int max_sample_rate();

}  // namespace dyni::profiler
