// The counting phase: inject counting copies, read their counters until
// stable, end them.
#include "dynid/counting_phase.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "common/file_io.h"
#include "common/log.h"
#include "dynid/target_table.h"

namespace dyni {
namespace {

using Clock = std::chrono::steady_clock;

// Every counter's value, in one vector (the order is the sites').
std::vector<uint64_t> flatten(const jit::ModuleCounts& counts) {
  std::vector<uint64_t> out;
  for (const auto& [entry, f] : counts.functions) {
    for (const auto& [offset, n] : f.blocks) out.push_back(n);
    for (const auto& [offset, n] : f.falls) out.push_back(n);
  }
  return out;
}

// L1 distance between two count vectors, each normalized to sum 1; 2 when
// either is all zero (nothing ran yet: not stable).
double distance(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  double sa = 0, sb = 0;
  for (uint64_t v : a) sa += static_cast<double>(v);
  for (uint64_t v : b) sb += static_cast<double>(v);
  if (sa == 0 || sb == 0 || a.size() != b.size()) return 2;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::abs(static_cast<double>(a[i]) / sa - static_cast<double>(b[i]) / sb);
  return d;
}

// A counting cache for `request`'s hot set, or why not.
Result<Injection> inject_counting(InjectRequest request) {
  request.options.cache.counting = true;
  // Shared slots: striped ones cost more than they saved on 2 CPUs (docs/counting.md).
  request.options.cache.counter_stripes = 0;
  return inject_module(request);
}

// Why a counting cache just injected cannot count, or "".
std::string why_it_cannot_count(const Injection& counting) {
  if (!counting.error.empty()) return counting.error;
  return count_of(counting.patched, PatchKind::Entry) == 0 ? "no entry could be patched" : "";  // pads alone reach nothing
}

}  // namespace

// The functions that ran while counting: the optimized cache holds those.
// A copy whose entry stays as it is (jit/patch_plan.h: mostly getters of a
// few bytes) counts only the calls from other copies; the indirect calls
// that reached its original were counted at their sites, as its calls: it
// ran too, and promoted calls then reach its copy directly.
std::vector<uint64_t> functions_that_ran(const jit::ModuleCounts& counts) {
  std::set<uint64_t> called;
  for (const auto& [entry, c] : counts.functions)
    for (const auto& [site, value] : c.values)
      for (const auto& [target, calls] : value.targets)
        if (calls > 0) called.insert(target);
  std::vector<uint64_t> out;
  for (const auto& [entry, c] : counts.functions)
    if (called.count(entry) || std::any_of(c.blocks.begin(), c.blocks.end(), [](const auto& b) { return b.second > 0; }))
      out.push_back(entry);
  return out;
}

Result<std::unique_ptr<CountingPhase>> CountingPhase::start(InjectRequest request) {
  auto counting = inject_counting(std::move(request));
  if (!counting) return std::unexpected(counting.error());
  std::unique_ptr<CountingPhase> phase(new CountingPhase(std::move(*counting)));
  if (std::string error = why_it_cannot_count(phase->injection()); !error.empty()) {
    phase->end();
    return fail("counting cache: " + error);
  }
  return phase;
}

// stop() refuses while adding_ is set, and only this thread ends the phase
// otherwise: it is neither stopped nor ended until add() returns.
Status CountingPhase::add(InjectRequest request) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || ended_ || switching_) return fail("the counting phase is over");
    adding_ = true;
  }
  // The caches already in keep counting meanwhile (a pause here, and a
  // resume in count(), would be two more windows that may be missed).
  auto counting = inject_counting(request);
  std::lock_guard lock(mutex_);
  adding_ = false;
  if (!counting) return fail(counting.error().message());
  Cache& added = caches_.emplace_back(Cache{std::move(*counting), request.module});
  std::string error = why_it_cannot_count(added.injection);
  if (error.empty()) return {};
  added.counts = false;
  end_cache(added);  // what -undo would do to it: the target loses nothing (end() retries it)
  return fail("counting cache: " + error);
}

const Injection* CountingPhase::injection_of(const std::string& module) const {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 1; i < caches_.size(); ++i)
    if (caches_[i].module == module && caches_[i].counts) return &caches_[i].injection;
  return nullptr;
}

CountingPhase::~CountingPhase() { end(); }

std::chrono::milliseconds CountingPhase::pause_for(int duty_percent) {
  duty_percent = std::clamp(duty_percent, 1, 100);
  return kReadInterval * (100 - duty_percent) / duty_percent;
}

Result<CountingPhase::Counts> CountingPhase::count(const Bounds& bounds, const std::function<bool()>& stopping) {
  const auto t0 = Clock::now();
  const auto elapsed = [&] { return Clock::now() - t0; };
  {
    std::lock_guard lock(mutex_);
    duty_percent_ = std::clamp(bounds.duty_percent, 1, 100);
    on_since_ = t0;
  }
  bool bursts = bounds.duty_percent < 100;  // off for good once a pause or a resume is missed
  std::vector<uint64_t> previous;
  int stable_reads = 0;
  for (;;) {
    std::this_thread::sleep_for(kReadInterval);  // a burst of counting
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return fail("stopped by dyni -undo");
      if (stopping()) {
        end_locked();
        return fail("dynid is stopping");
      }
      // In bursts the pause starts before the read: a slow read (below)
      // does not lengthen the burst.
      // A pause missed in one cache: no more pauses, and the caches that
      // did pause count again with it (else their counts would freeze).
      if (bursts && !pause_locked()) {
        bursts = false;
        resume_locked();
      }
    }
    // Outside the lock, which -status needs: reading the target's memory
    // waits for its mmap lock, which the target's own threads may hold for
    // long. caches_ is never changed once counting began, nor an injection.
    const auto read_at = Clock::now();
    auto counts = read_all();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - read_at);
    if (took >= kSlowRead)
      log::warn("counting cache at {:#x} of pid {}: reading the counters took {} ms", injection().cache.addr,
                injection().pid, took.count());
    std::unique_lock lock(mutex_);
    if (stopped_) return fail("stopped by dyni -undo");
    if (!counts) {
      end_locked();
      return fail("counters unreadable: " + counts.error().message());
    }
    seconds_ = std::chrono::duration<double>(elapsed()).count();
    std::vector<uint64_t> now = flatten(counts->first);
    for (const auto& [module, more] : counts->more) {
      std::vector<uint64_t> its = flatten(more);
      now.insert(now.end(), its.begin(), its.end());
    }
    total_ = 0;
    for (uint64_t v : now) total_ += v;
    last_distance_ = distance(previous, now);
    stable_reads = last_distance_ < kStableDistance ? stable_reads + 1 : 0;
    previous = std::move(now);
    stable_ = stable_reads >= 2 && elapsed() >= bounds.minimum;
    // A burst that would end past the ceiling is not begun.
    const auto next_burst_ends = elapsed() + (bursts ? pause_for(duty_percent_) : std::chrono::milliseconds(0)) + kReadInterval;
    if (stable_ || elapsed() >= bounds.ceiling || (bursts && next_burst_ends > bounds.ceiling)) {
      // The optimized cache is built on the original code, not on counting copies.
      pause_locked();
      stop_clock();
      set_seconds(*counts);
      phase_ = stable_ ? "counted: stable" : "counted: ceiling reached";
      return counts;
    }
    if (!bursts) continue;
    lock.unlock();
    const auto pause_left = std::max(std::chrono::milliseconds(0), pause_for(duty_percent_) - took);
    if (!wait_paused(pause_left, stopping)) {
      lock.lock();
      if (stopped_) return fail("stopped by dyni -undo");
      end_locked();
      return fail("dynid is stopping");
    }
    lock.lock();
    if (stopped_) return fail("stopped by dyni -undo");
    if (stopping()) {
      end_locked();
      return fail("dynid is stopping");
    }
    if (!resume_locked()) {  // nothing leads to the counting copies: these counts are all there will be
      bursts = false;
      set_seconds(*counts);
      phase_ = "counted: counting could not resume";
      return counts;
    }
  }
}

Result<CountingPhase::Counts> CountingPhase::read_all() const {
  Counts out;
  for (const Cache& c : caches_) {
    if (!c.counts) continue;
    auto counts = read_counts(c.injection);
    if (!counts) return std::unexpected(counts.error());
    if (&c == &caches_.front()) out.first = std::move(*counts);
    else out.more[c.module] = std::move(*counts);
  }
  return out;
}

void CountingPhase::set_seconds(Counts& counts) const {
  counts.first.seconds = counting_seconds_;
  for (auto& [module, more] : counts.more) more.seconds = counting_seconds_;
}

// undo_patches writes only where the counting jump still is. When a
// module's window is missed its entries stay on the counting copies: false
// (those that paused stay paused until resume_locked()). paused_: every
// counting cache not ended is paused.
bool CountingPhase::pause_locked() {
  if (ended_) return true;
  const auto t0 = Clock::now();
  bool missed = false;
  for (Cache& c : caches_) {
    if (c.paused || !c.counts || c.ended) continue;  // an ended cache never comes back
    auto undone = undo_patches(c.injection, /*one_window=*/true);
    if (!undone) {
      log::info("counting cache at {:#x} of pid {}: no pause ({}): counting goes on without pauses",
                c.injection.cache.addr, c.injection.pid, undone.error().message());
      missed = true;
      continue;
    }
    c.paused = true;
  }
  longest_pause_ = std::max(longest_pause_, Clock::now() - t0);
  if (missed) return false;
  if (!paused_) {
    paused_ = true;
    ++pauses_;
    stop_clock();
  }
  return true;
}

void CountingPhase::stop_clock() {
  if (!clock_running_) return;
  counting_seconds_ += std::chrono::duration<double>(Clock::now() - on_since_).count();
  clock_running_ = false;
}

// Never after end_locked() or stop(): an ended counting cache never comes
// back. In one window: entries that must wait stay on the file's bytes.
// Also after a partial pause (paused_ false, some caches paused).
bool CountingPhase::resume_locked() {
  if (ended_ || stopped_) return false;
  const auto t0 = Clock::now();
  entries_resumed_ = 0;
  for (Cache& c : caches_) {
    // Ended (a stop() that ended some caches and missed another's window):
    // never patched in again.
    if (!c.paused || !c.counts || c.ended) continue;
    auto again = resume_counting(c.injection);
    const std::size_t resumed = again ? count_of(again->patched, PatchKind::Entry) : 0;
    if (!again || !again->error.empty() || resumed < count_of(c.injection.patched, PatchKind::Entry))
      log::info("counting cache at {:#x} of pid {}: {} of {} entries patched in again{}{}", c.injection.cache.addr,
                c.injection.pid, resumed, count_of(c.injection.patched, PatchKind::Entry), again ? "" : ": ",
                again ? again->error : again.error().message());
    if (resumed) c.paused = false;  // else it stays paused: its counts so far stand
    entries_resumed_ += resumed;
  }
  longest_resume_ = std::max(longest_resume_, Clock::now() - t0);
  if (entries_resumed_ == 0) return false;  // still paused (the clock stopped when all were)
  if (paused_) {
    paused_ = false;
    on_since_ = Clock::now();
    clock_running_ = true;
  }
  return true;
}

bool CountingPhase::wait_paused(std::chrono::milliseconds how_long, const std::function<bool()>& stopping) {
  constexpr std::chrono::milliseconds kStep{50};
  const auto until = Clock::now() + how_long;
  while (Clock::now() < until) {
    std::this_thread::sleep_for(std::min<Clock::duration>(kStep, until - Clock::now()));
    if (stopping()) return false;  // not stopped_: a failed stop() sets it for a moment
  }
  return true;
}

bool CountingPhase::begin_switch() {
  std::lock_guard lock(mutex_);
  if (stopped_ || ended_) return false;
  switching_ = true;
  phase_ = "switching to the optimized code";
  return true;
}

void CountingPhase::replaced_by(const Injection& optimized) {
  std::lock_guard lock(mutex_);
  for (const PatchRecord& p : optimized.patched) replaced_.insert(p.addr);
}

bool CountingPhase::end() {
  std::lock_guard lock(mutex_);
  return end_locked();
}

bool CountingPhase::end_locked() {
  if (ended_) return true;
  switching_ = false;
  stop_clock();
  std::string why;
  for (Cache& c : caches_)
    if (std::string not_ended = end_cache(c); !not_ended.empty()) why += (why.empty() ? "" : "; ") + not_ended;
  end_error_ = why;
  ended_ = why.empty();  // else it is tried again
  if (!stopped_) phase_ = why.empty() ? "ended" : "ending: " + why;
  return ended_;
}

// Undo writes only entries that still hold a counting jump: those an
// optimized cache re-pointed hold its own.
std::string CountingPhase::end_cache(Cache& c) {
  std::string why;
  Injection ours = c.injection;  // the entries the optimized cache did not re-point
  std::erase_if(ours.patched, [&](const PatchRecord& p) { return replaced_.contains(p.addr); });
  // Ended already: no window unless an entry holds its jump again (never,
  // since nothing patches an ended cache in; checked all the same).
  if (c.ended) {
    auto again = undo_patches(ours, /*one_window=*/true);
    return again ? "" : "entries of an ended cache: " + again.error().message();
  }
  if (auto undone = undo_patches(ours); !undone) why = "entries: " + undone.error().message();
  auto off = counters_off(c.injection);
  if (off) c.sites_off = *off;
  else why += (why.empty() ? "" : "; ") + std::string("counters: ") + off.error().message();
  if (!why.empty())
    log::warn("counting cache at {:#x} of pid {}: ending it: {}", c.injection.cache.addr, c.injection.pid, why);
  c.ended = why.empty();
  return why;
}

Result<std::string> CountingPhase::stop() {
  std::lock_guard lock(mutex_);
  if (switching_) return fail("switching to the optimized code; run dyni -undo again in a few seconds");
  if (adding_) return fail("counting begins in another module; run dyni -undo again in a few seconds");
  if (ended_) return fail("being dynimized; run dyni -undo again in a few seconds");  // counting is over
  // An optimized cache re-pointed its entries (replaced_by): ending the
  // phase now would leave that cache live under an `undone` target.
  if (!replaced_.empty()) return fail("being dynimized; run dyni -undo again in a few seconds");
  stopped_ = true;
  if (!end_locked()) {  // the phase goes on, and ends later (or at the next -undo)
    stopped_ = false;
    return fail("counting could not be stopped now (" + end_error_ + "); run dyni -undo again");
  }
  phase_ = "stopped by dyni -undo";
  std::size_t entries = 0;
  for (const Cache& c : caches_) entries += count_of(c.injection.patched, PatchKind::Entry);
  return fmt::format("counting stopped, original code restored ({} entries{})", entries,
                     caches_.size() > 1 ? fmt::format(" in {} modules", caches_.size()) : "");
}

void CountingPhase::save_counts(const jit::ModuleCounts& counts, const std::string& path, const std::string& module) {
  const std::string dir = path.substr(0, path.rfind('/'));
  Status saved = ensure_dir_p(dir, 0755);
  if (saved) saved = write_file_atomic(path, counts.to_json().dump() + "\n", 0644);
  std::lock_guard lock(mutex_);
  std::string* file = &counts_file_;
  std::string* error = &counts_file_error_;
  for (std::size_t i = 1; i < caches_.size(); ++i)
    if (!module.empty() && caches_[i].module == module) file = &caches_[i].counts_file, error = &caches_[i].counts_file_error;
  if (saved) *file = path;
  else *error = saved.error().message();
}

nlohmann::json CountingPhase::to_json() const {
  // -status never waits for a window (end() and stop() hold the lock across
  // theirs, which take seconds where the target's memory is contended): it
  // gets what was true when it last could look, marked so.
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    std::lock_guard last(last_json_mutex_);
    nlohmann::json j = last_json_;
    j["as_of_ms_ago"] = now_mono_ms() - last_json_ms_;
    return j;
  }
  nlohmann::json j = current_json();
  std::lock_guard last(last_json_mutex_);
  last_json_ = j, last_json_ms_ = now_mono_ms();
  return j;
}

namespace {

// One module's counting cache, for -status -json.
nlohmann::json cache_json(const Injection& counting) {
  return {{"addr", fmt::format("{:#x}", counting.cache.addr)},
          {"code_bytes", counting.code_size},
          {"counters_addr", fmt::format("{:#x}", counting.counters.addr)},
          {"counters_bytes", counting.counters.length}};
}

}  // namespace

nlohmann::json CountingPhase::current_json() const {
  const Cache& first = caches_.front();
  nlohmann::json more = nlohmann::json::array();
  for (std::size_t i = 1; i < caches_.size(); ++i) {
    const Cache& c = caches_[i];
    more.push_back({{"module", c.module},
                    {"counts", c.counts},
                    {"functions", c.injection.counted.size()},
                    {"entries_patched", count_of(c.injection.patched, PatchKind::Entry)},
                    {"counter_sites", c.injection.counter_sites.size()},
                    {"counter_sites_off", c.sites_off},
                    {"counts_file", c.counts_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.counts_file)},
                    {"counts_file_error", c.counts_file_error},
                    {"cache", cache_json(c.injection)}});
  }
  return {{"phase", phase_},
          {"seconds", seconds_},
          {"counting_seconds", counting_seconds_},
          {"duty_percent", duty_percent_},
          {"paused", paused_},
          {"pauses", pauses_},
          {"entries_resumed", entries_resumed_},
          {"longest_pause_ms", std::chrono::duration<double, std::milli>(longest_pause_).count()},
          {"longest_resume_ms", std::chrono::duration<double, std::milli>(longest_resume_).count()},
          {"functions", first.injection.counted.size()},
          {"entries_patched", count_of(first.injection.patched, PatchKind::Entry)},
          {"counter_sites", first.injection.counter_sites.size()},
          {"counter_sites_off", first.sites_off},
          {"skipped", skipped_by_kind(first.injection.skipped)},
          {"counts_total", total_},
          {"change_between_reads", last_distance_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_distance_)},
          {"stable", stable_},
          {"cache", cache_json(first.injection)},
          {"more_modules", more},
          {"counts_file", counts_file_.empty() ? nlohmann::json(nullptr) : nlohmann::json(counts_file_)},
          {"counts_file_error", counts_file_error_},
          {"error", end_error_}};
}

}  // namespace dyni
