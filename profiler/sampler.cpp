// perf_event_open per thread, ring-buffer reading, hardware→software fallback.
#include "profiler/sampler.h"

#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>
#include <set>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/log.h"

namespace dyni::profiler {
namespace {

constexpr std::size_t kRingPages = 64;  // data pages per thread (power of two): 256 KiB
// Callchain depth the kernel walks per sample: the sampled ip and its caller
// are all the profile uses (caller→callee weights), and every frame walked is
// a read of user memory inside the sampling interrupt.
constexpr uint16_t kMaxStack = 4;

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }
std::size_t ring_bytes() { return (kRingPages + 1) * page_size(); }

std::vector<pid_t> list_threads(pid_t pid) {
  return list_numeric_entries("/proc/" + std::to_string(pid) + "/task");
}

constexpr uint64_t kMaxBranches = 64;  // LBR depth is 8–32; more is a corrupt record

perf_event_attr make_attr(uint32_t type, uint64_t config, const SamplerOptions& o, bool branch_stack) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = type;
  attr.config = config;
  attr.freq = 1;
  attr.sample_freq = static_cast<uint64_t>(std::min(o.frequency_hz, max_sample_rate()));
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | (o.callchains ? PERF_SAMPLE_CALLCHAIN : 0);
  attr.exclude_kernel = 1;  // only user code is ever optimized
  attr.exclude_hv = 1;
  attr.exclude_callchain_kernel = 1;
  attr.sample_max_stack = kMaxStack;
  if (o.descendants && o.scope == SamplerScope::PerCpu) {
    // Fork, exec and exit records, every record timed on one clock for all
    // CPUs (sampler.h: Descendants).
    attr.sample_type |= PERF_SAMPLE_TIME;
    attr.task = 1;
    attr.comm = 1;
    attr.comm_exec = 1;
    attr.sample_id_all = 1;
    attr.use_clockid = 1;
    attr.clockid = CLOCK_MONOTONIC;
  }
  if (branch_stack) {
    attr.sample_type |= PERF_SAMPLE_BRANCH_STACK;
    attr.branch_sample_type = PERF_SAMPLE_BRANCH_USER | PERF_SAMPLE_BRANCH_ANY;
  }
  return attr;
}

int perf_open(perf_event_attr& attr, pid_t tid, int cpu = -1) {
  return static_cast<int>(::syscall(SYS_perf_event_open, &attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

int online_cpus() {
  long n = ::sysconf(_SC_NPROCESSORS_CONF);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

std::optional<Sample> parse_sample(std::span<const uint8_t> body, const SampleFormat& format, pid_t& pid,
                                   uint64_t* time) {
  const uint8_t* p = body.data();
  const uint8_t* end = body.data() + body.size();
  auto take = [&](auto& out) {
    if (static_cast<std::size_t>(end - p) < sizeof out) return false;
    std::memcpy(&out, p, sizeof out);
    p += sizeof out;
    return true;
  };
  Sample s;
  uint32_t pid32 = 0, tid32 = 0;
  if (!take(s.ip) || !take(pid32) || !take(tid32)) return std::nullopt;
  pid = static_cast<pid_t>(pid32);
  s.tid = static_cast<pid_t>(tid32);
  uint64_t at = 0;
  if (format.time && !take(at)) return std::nullopt;
  if (time) *time = at;
  if (format.callchain) {
    uint64_t nr = 0;
    if (!take(nr)) return std::nullopt;
    for (uint64_t i = 0; i < nr; ++i) {
      uint64_t frame = 0;
      if (!take(frame)) return std::nullopt;
      if (frame >= PERF_CONTEXT_MAX || s.callchain.size() >= kMaxStack) continue;  // context markers
      s.callchain.push_back(frame);
    }
    // The chain starts with the sampled ip itself; keep only its callers.
    if (!s.callchain.empty() && s.callchain.front() == s.ip) s.callchain.erase(s.callchain.begin());
  }
  if (format.branch_stack) {
    uint64_t nr = 0;
    if (!take(nr) || nr > kMaxBranches) return std::nullopt;
    for (uint64_t i = 0; i < nr; ++i) {
      uint64_t from = 0, to = 0, flags = 0;
      if (!take(from) || !take(to) || !take(flags)) return std::nullopt;
      s.branches.push_back({from, to});
    }
  }
  return s;
}

int max_sample_rate() {
  auto text = read_file("/proc/sys/kernel/perf_event_max_sample_rate", 64);
  int rate = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), rate);
  return rate > 0 ? rate : 1000;
}

Result<Sampler> Sampler::attach(pid_t pid, const SamplerOptions& options) {
  Sampler s(pid, options);
  // Probe which event this machine has, on the main thread.
  struct Candidate {
    uint32_t type;
    uint64_t config;
    bool branch_stack;
    const char* name;
  };
  std::vector<Candidate> candidates;
  if (options.allow_hardware && options.branch_stacks)
    candidates.push_back({PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true, "cycles with branch stacks"});
  if (options.allow_hardware) candidates.push_back({PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, false, "cycles"});
  candidates.push_back({PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, false, "cpu-clock"});
  std::string why;
  for (const auto& c : candidates) {
    perf_event_attr attr = make_attr(c.type, c.config, options, c.branch_stack);
    int fd = perf_open(attr, pid);
    if (fd < 0) {
      why += std::string(why.empty() ? "" : "; ") + c.name + ": " + errno_text();
      continue;
    }
    ::close(fd);
    s.event_type_ = c.type;
    s.event_config_ = c.config;
    s.event_name_ = c.name;
    s.format_ = {options.callchains, c.branch_stack, options.descendants && options.scope == SamplerScope::PerCpu};
    break;
  }
  if (s.event_name_.empty()) return fail("perf_event_open failed (" + why + ")");
  if (!why.empty()) log::info("profiler: pid {}: using {} ({})", pid, s.event_name_, why);
  s.scope_ = options.scope;
  if (s.scope_ == SamplerScope::PerCpu) {
    if (auto r = s.open_cpus(); !r) {
      log::info("profiler: pid {}: system-wide sampling not allowed ({}), sampling per thread",
                pid, r.error().message());
      s.scope_ = SamplerScope::PerThread;
      if (options.descendants)
        log::info("profiler: pid {}: the processes it forks are not sampled (that needs system-wide sampling)", pid);
      s.options_.descendants = false;
      s.format_.time = false;
    }
  }
  if (s.format_.time) s.tree_.emplace(pid, options.relatives);
  if (auto r = s.refresh_threads(); !r) return std::unexpected(r.error());
  return s;
}

Sampler::Sampler(Sampler&& o) noexcept
    : pid_(o.pid_), options_(o.options_), event_type_(o.event_type_), event_config_(o.event_config_),
      event_name_(std::move(o.event_name_)), format_(o.format_), scope_(o.scope_), threads_(std::move(o.threads_)),
      tids_seen_(std::move(o.tids_seen_)), pids_seen_(std::move(o.pids_seen_)), stats_(o.stats_),
      tree_(std::move(o.tree_)), later_(std::move(o.later_)) {
  o.threads_.clear();
}

Sampler::~Sampler() { stop(); }

void Sampler::stop() {
  for (auto& [tid, e] : threads_) close_thread(e);
  threads_.clear();
}

// One event with its ring buffer: for thread `tid` on any CPU, or (tid -1)
// for every process on `cpu`.
Result<Sampler::ThreadEvent> Sampler::open_event(pid_t tid, int cpu) {
  perf_event_attr attr = make_attr(event_type_, event_config_, options_, format_.branch_stack);
  int fd = perf_open(attr, tid, cpu);
  if (fd < 0) return fail(sys_error(fmt::format("perf_event_open tid {} cpu {}", tid, cpu)));
  void* ring = ::mmap(nullptr, ring_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return fail(sys_error("mmap perf ring for tid " + std::to_string(tid), err));
  }
  return ThreadEvent{fd, ring};
}

void Sampler::close_thread(ThreadEvent& e) {
  if (e.ring) ::munmap(e.ring, ring_bytes());
  if (e.fd >= 0) ::close(e.fd);
  e = {};
}

Status Sampler::open_cpus() {
  for (int cpu = 0; cpu < online_cpus(); ++cpu) {
    auto e = open_event(-1, cpu);
    if (!e) {
      if (errno == ENODEV || errno == ENOENT) continue;  // an offline CPU
      for (auto& [c, ev] : threads_) close_thread(ev);
      threads_.clear();
      return std::unexpected(e.error());
    }
    threads_[cpu] = *e;
  }
  if (threads_.empty()) return fail("no CPU accepted a sampling event");
  return ok();
}

Status Sampler::refresh_threads() {
  std::vector<pid_t> tids = list_threads(pid_);
  if (tids.empty()) return fail("process " + std::to_string(pid_) + " is gone");
  if (scope_ == SamplerScope::PerCpu) {
    stats_.threads = tids.size();
    stats_.threads_seen = tids_seen_.size();
    return ok();
  }
  std::set<pid_t> live(tids.begin(), tids.end());
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    close_thread(it->second);  // its samples were drained before this refresh
    it = threads_.erase(it);
  }
  for (pid_t tid : tids) {
    if (threads_.count(tid)) continue;
    auto e = open_event(tid, -1);
    if (!e) continue;  // the thread exited between listing and opening
    threads_[tid] = *e;
    ++stats_.threads_seen;
  }
  stats_.threads = threads_.size();
  return ok();
}

void Sampler::drain(const std::function<void(const Sample&)>& sink) {
  if (tree_) {
    drain_descendants(sink);
    return;
  }
  for (auto& [tid, e] : threads_)
    drain_one(e, [&](uint32_t type, uint16_t, std::span<const uint8_t> body) {
      if (type != PERF_RECORD_SAMPLE) return;
      pid_t pid = 0;
      std::optional<Sample> s = parse_sample(body, format_, pid);
      if (s && pid == pid_) take(*s, pid, sink);  // PerCpu: not another process
    });
}

void Sampler::take(const Sample& s, pid_t pid, const std::function<void(const Sample&)>& sink) {
  tids_seen_.insert(s.tid);
  if (pids_seen_.insert(pid).second) stats_.processes_seen = pids_seen_.size();
  ++stats_.samples;
  sink(s);
}

namespace {

// The fields of a FORK or EXIT record: pid, ppid, tid, ptid, time.
struct TaskRecord {
  uint32_t pid, ppid, tid, ptid;
  uint64_t time;
};

// sample_id_all puts the record's time in its last 8 bytes (sample_type's
// TID and TIME are all that go there).
std::optional<uint64_t> trailing_time(std::span<const uint8_t> body) {
  if (body.size() < 16) return std::nullopt;
  uint64_t time = 0;
  std::memcpy(&time, body.data() + body.size() - 8, 8);
  return time;
}

uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

// Every ring's samples and fork, exec and exit records, appended to `out`.
void Sampler::read_timed(std::vector<TimedRecord>& out) {
  for (auto& [cpu, e] : threads_)
    drain_one(e, [&](uint32_t type, uint16_t misc, std::span<const uint8_t> body) {
      if (type == PERF_RECORD_SAMPLE) {
        pid_t pid = 0;
        uint64_t time = 0;
        if (std::optional<Sample> s = parse_sample(body, format_, pid, &time))
          out.push_back({TimedRecord::SampleOf, time, pid, 0, std::move(*s)});
      } else if ((type == PERF_RECORD_FORK || type == PERF_RECORD_EXIT) && body.size() >= sizeof(TaskRecord)) {
        TaskRecord r;
        std::memcpy(&r, body.data(), sizeof r);
        // Threads come and go within a process: only processes matter.
        if (type == PERF_RECORD_FORK && r.pid != r.ppid)
          out.push_back({TimedRecord::Fork, r.time, static_cast<pid_t>(r.pid), static_cast<pid_t>(r.ppid), {}});
        if (type == PERF_RECORD_EXIT && r.pid == r.tid)
          out.push_back({TimedRecord::Exit, r.time, static_cast<pid_t>(r.pid), 0, {}});
      } else if (type == PERF_RECORD_COMM && (misc & PERF_RECORD_MISC_COMM_EXEC) && body.size() >= 4) {
        uint32_t pid = 0;
        std::memcpy(&pid, body.data(), 4);
        if (auto time = trailing_time(body)) out.push_back({TimedRecord::Exec, *time, static_cast<pid_t>(pid), 0, {}});
      }
    });
}

// Sampler.h, Descendants: every ring read, then all of it up to the
// watermark in time order.
void Sampler::drain_descendants(const std::function<void(const Sample&)>& sink) {
  constexpr uint64_t kWriteMarginNs = 1'000'000;  // a record being written as the drain starts
  const uint64_t watermark = monotonic_ns() - kWriteMarginNs;
  std::vector<TimedRecord> records = std::move(later_);
  later_.clear();
  read_timed(records);
  std::stable_sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
  for (TimedRecord& r : records) {
    if (r.time > watermark) {
      later_.push_back(std::move(r));
      continue;
    }
    switch (r.kind) {
      case TimedRecord::Fork: tree_->forked(r.pid, r.ppid, r.time); break;
      case TimedRecord::Exec: tree_->execd(r.pid, r.time); break;
      case TimedRecord::Exit: tree_->exited(r.pid, r.time); break;
      case TimedRecord::SampleOf:
        if (tree_->member(r.pid, r.time).value_or(false)) take(r.sample, r.pid, sink);
        break;
    }
  }
  // A process that ended 10 s ago has no records left unread (drains are
  // 100 ms apart).
  constexpr uint64_t kForgetNs = 10'000'000'000ull;
  if (watermark > kForgetNs) tree_->forget_before(watermark - kForgetNs);
}

// Reads the records between data_tail and data_head. A record may wrap around
// the end of the ring, so each is copied out before it is parsed.
void Sampler::drain_one(ThreadEvent& e, const RecordSink& sink) {
  auto* meta = static_cast<perf_event_mmap_page*>(e.ring);
  const uint8_t* data = static_cast<const uint8_t*>(e.ring) + page_size();
  const uint64_t size = kRingPages * page_size();
  uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = meta->data_tail;
  std::vector<uint8_t> record;
  while (tail < head) {
    perf_event_header hdr;
    for (std::size_t i = 0; i < sizeof hdr; ++i)
      reinterpret_cast<uint8_t*>(&hdr)[i] = data[(tail + i) % size];
    if (hdr.size < sizeof hdr || hdr.size > head - tail) {
      tail = head;  // a corrupt header: drop the rest rather than stall on it
      break;
    }
    record.resize(hdr.size);
    for (std::size_t i = 0; i < hdr.size; ++i) record[i] = data[(tail + i) % size];
    tail += hdr.size;
    std::span<const uint8_t> body(record.data() + sizeof hdr, record.size() - sizeof hdr);
    if (hdr.type == PERF_RECORD_LOST) {
      uint64_t lost_record[2] = {0, 0};  // id, lost
      if (body.size() >= sizeof lost_record) std::memcpy(lost_record, body.data(), sizeof lost_record);
      stats_.lost += lost_record[1];
      continue;
    }
    sink(hdr.type, hdr.misc, body);
  }
  __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

DescendantTree::DescendantTree(pid_t root, const std::vector<pid_t>& relatives) : root_(root) {
  spans_.insert({root, Span{}});
  for (pid_t r : relatives)
    if (r != root) spans_.insert({r, Span{}});
}

void DescendantTree::forked(pid_t child, pid_t parent, uint64_t time) {
  if (child != root_) end(child, time);  // an exit record missed: the pid is the new process's now, ours or not
  if (member(parent, time).value_or(false)) spans_.insert({child, Span{time, kNever}});
}

void DescendantTree::execd(pid_t pid, uint64_t time) {
  if (pid != root_) end(pid, time);
}

void DescendantTree::exited(pid_t pid, uint64_t time) {
  if (pid != root_) end(pid, time);
}

void DescendantTree::end(pid_t pid, uint64_t time) {
  auto [first, last] = spans_.equal_range(pid);
  for (auto it = first; it != last; ++it)
    if (it->second.to == kNever) it->second.to = time;
}

std::optional<bool> DescendantTree::member(pid_t pid, uint64_t time) const {
  auto [first, last] = spans_.equal_range(pid);
  if (first == last) return std::nullopt;
  return std::any_of(first, last, [&](const auto& s) { return s.second.from <= time && time < s.second.to; });
}

void DescendantTree::forget_before(uint64_t time) {
  std::erase_if(spans_, [&](const auto& s) { return s.first != root_ && s.second.to < time; });
}

}  // namespace dyni::profiler
