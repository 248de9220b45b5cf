// Live injection of an executable's hot code (DESIGN.md §3 step 7), in order
// (injector.cpp lists the steps; dynid/inject/ holds one file per step):
//  1. prepare  the jit plans the hot functions, first at a provisional
//              address (for the size), then at the cache's real place
//              (inject/prepare.h, cache_placement.h);
//  2. map      the cache in one short stop window (inject/map_window.h), and
//              a counting cache's counters beside it;
//  3. write    return stub, code and .eh_frame while the target runs:
//              nothing reaches the cache yet (I2; inject/cache_contents.h);
//  4. register the .eh_frame with the target's own unwinder through a
//              function call in a clean thread (inject/frames_registration.h,
//              I7); then the record, last before any patch;
//  5. patch    each entry in a stop window after the live checks
//              (inject/patch_entries.h, patch_safety.h, I4): one 5-byte write
//              per entry (I2); an entry that holds the jump of the counting
//              cache this one replaces is re-pointed, in one write too.
// Only functions with unwind information are patched. dynid's lifecycle
// (lifecycle.h) runs it; tools and tests drive it too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "dynid/cache_mapping.h"
#include "dynid/cache_record.h"
#include "dynid/thread_unwind.h"
#include "jit/layout_metrics.h"
#include "jit/pipeline.h"

namespace dyni {

struct InjectRequest {
  pid_t pid = 0;
  std::vector<uint64_t> hot;  // link-time entry addresses in the module
  // The module whose hot functions are copied: a library's path as the
  // target maps it (inject/target_module.h says which stay as they are), or
  // empty for the executable (or its path).
  std::string module{};
  const jit::ModuleProfile* profile = nullptr;  // lays out blocks by it; null: original order
  const jit::ModuleCounts* counts = nullptr;    // exact counts (a counting cache's): lay out by them
  // The counting cache this one replaces: an entry that holds its jump is
  // re-pointed at the new copy in one write (else it must hold the file's bytes).
  const struct Injection* replacing = nullptr;
  // The copies of the target's other caches, where known (the first module's,
  // all_hot_modules): a thread stopped in one of them is in its function
  // (clean_thread.h: it may take the frames registration's call).
  std::vector<struct CopyRange> other_copies{};
  // Functions whose direct calls to copied functions are re-pointed at the
  // copies (link-time starts, jit/call_sites.h): those that ran; the copied
  // ones among them are passed over. An optimized cache's only. Empty: none.
  std::vector<uint64_t> callers{};
  // The target's other copied modules (all_hot_modules), by path as the
  // target maps them, before or after this one: their JUMP_SLOT GOT slots
  // bound to the copied functions are re-pointed at the copies, after the
  // entries (inject/got_repoint.h). Empty: none.
  std::vector<std::string> slot_holders{};
  std::chrono::milliseconds call_timeout{2000};
  jit::JitOptions options{};
  // The image the caller profiled (ProcStat::image, 0: not checked): a
  // process that exec'd since (same pid and start time) is refused.
  uint64_t image = 0;
  // Its start time when found (0: not checked): a pid taken by another
  // process since is refused, whatever its image.
  uint64_t start_time = 0;
  // The cache on huge pages where the target turned THP off for itself, and
  // again after a fork split them (cache_huge_pages.h). false: small pages
  // there, a measurement's control (dyni-inject's DYNI_LIFT_THP=0).
  bool lift_thp = true;
  // A cache that takes less (code, frames, record, counters) is a small one,
  // on small pages in 64 KiB steps, not a 2 MiB huge page (cache_placement.h;
  // [options] small_cache_kib; 0: none).
  uint64_t small_cache_bytes = kSmallCacheBytes;
  // A group's parent (process_group.h): refused unless it has one thread,
  // in the window that maps the cache and in the one that registers its
  // frames (remote_call.h: a thread of it could fork while
  // __register_frame holds the unwinder's lock).
  bool single_threaded = false;
  // A counting cache whose counters a fork shares (cache_mapping.h): the
  // processes the target forks while counting count into its pages.
  bool shared_counters = false;
};

// The profile to lay blocks out by: `profile` where it has measured edges
// (LBR), else null (original block order). From IP samples alone the
// inferred edges made mariadbd's copies slower than their original block
// order (bench/injection_ab.sh, QPS dynimized/original, AMD EPYC KVM: 0.889
// by profile vs 0.918 in original order; with vtables pointed at the copies,
// 0.921 vs 0.993).
const jit::ModuleProfile* layout_profile(const jit::ModuleProfile& profile);

// One function's copy in the cache, run-time addresses (perf maps, status).
struct CopyRange {
  uint64_t cache_addr = 0, size = 0;
  uint64_t original_entry = 0;
  std::string name;  // for people: demangled, or func_<hex link-time address>
  // (offset in the copy, run-time original instruction), where it changes:
  // what `dyni -addr2orig` reads back (copy_origins.h).
  std::vector<std::pair<uint32_t, uint64_t>> lines;
  // Its planned entry patch (run-time; 0: none), and whether it changes no
  // byte where an instruction of the file begins (jit/patch_plan.h: a uprobe
  // anywhere leaves it whole). Unknown for a cache adopted from its record.
  uint64_t entry_patch = 0;
  std::optional<bool> entry_probe_safe = std::nullopt;
};

// Where a patch window's time went (the longest one is kept).
struct WindowTiming {
  std::chrono::microseconds total{0}, stop{0}, unwind{0}, check{0}, write{0}, release{0};
  std::size_t threads = 0, writes = 0;
};

struct Injection {
  pid_t pid = 0;
  uint64_t start_time = 0;  // with pid, names the process (checked in every stop window)
  CacheTier tier = CacheTier::Optimized;
  MappedCache cache;
  // A counting cache's (request.options.cache.counting): its counters'
  // mapping, its counter sites, and each copy's sites with their slots
  // (link-time entry → sites), from which read_counts makes counts.
  MappedCache counters;
  std::vector<CounterSiteRecord> counter_sites;
  jit::CounterLayout counter_layout;  // where its slots lie in `counters` (striped or shared)
  std::map<uint64_t, std::vector<jit::CounterSite>> counted;
  std::string build_id, module;
  uint64_t module_bias = 0;  // value sites count run-time targets: less this, link-time ones
  // The copied module's file and where its code mapping loads it (start -
  // file offset): every patch window writes only into that mapping of that
  // file, since a library can be unloaded and another file, or the same one
  // elsewhere, mapped where it was. 0: not known (a cache adopted from its
  // record, an executable's: an exec replaces the cache too).
  uint64_t module_inode = 0, module_load = 0;
  uint64_t module_dev = 0;  // with the inode, the file's identity (0: not known)
  // The module's PLT slots its copies call past (run-time slot → the value
  // read): every patch window reads them again and patches nothing if one
  // changed (a GOT hook installed meanwhile would be bypassed).
  std::map<uint64_t, uint64_t> bypassed_slots;
  std::vector<CopyRange> copies;
  nlohmann::json plan;  // the jit's plan, summarized (cache_plan.h plan_summary)
  std::size_t promoted_calls = 0;  // indirect calls promoted to guarded direct calls (jit/promotion.h)
  uint64_t code_addr = 0, code_size = 0;  // run-time
  uint64_t eh_frame_addr = 0;
  std::vector<uint8_t> eh_frame;  // the cache's unwind rows as written there (for gdb's symbol file)
  UnwindTable frames;  // the cache's frames, for dynid's own stack proofs
  // Frames of the target's other dyni caches (a counting cache that threads
  // may still run in): every stack proof needs them too.
  std::vector<UnwindTable> other_frames;
  std::vector<CopyRange> other_copies;  // their copies, where known (the counting cache replaced)
  std::string frames_registered;  // with the target's unwinder: "yes: …" or "no: why"
  std::vector<PatchRecord> patched;
  // Each pad of the record → the short entry that jumps to it, written or
  // not (jit/entry_pads.h): undo puts a pad back only where no short jump
  // leads to it any more, this cache's or another's (a counting cache's,
  // the same 2 bytes).
  std::map<uint64_t, uint64_t> pad_entries;
  // Other modules' GOT slots to re-point at the copies (inject/got_repoint.h):
  // those its record names, and those written (a cache adopted from its
  // record: all it names).
  std::vector<SlotRecord> slots, slots_patched;
  std::vector<std::string> skipped;  // "func_<addr>: reason"
  std::chrono::microseconds longest_stop{0};
  WindowTiming longest_window;  // of the patch windows
  std::size_t patch_windows = 0;  // stop windows that patched entries and call sites in (injection, redo)
  std::string error;  // set when a step failed after the cache was mapped
  // Laid out by counts (request.counts): what the counts say of the original
  // code and of this cache (jit/layout_metrics.h; dyni -profile=PID).
  std::optional<jit::CountMetrics> count_metrics;
};

// How many of `skipped` ("func_1234: its code in memory differs from the
// file") there are of each kind ("its code in memory differs from the file").
std::map<std::string, std::size_t> skipped_by_kind(const std::vector<std::string>& skipped);

// Fails with the reason when nothing was done to the target. Once the cache
// is mapped it returns what was done, with `error` set if a later step
// failed, so that the caller can undo it (patched entries) or know the cache.
Result<Injection> inject_module(const InjectRequest& request);

// A counting cache's counts so far, read from the target (the counters
// keep running).
Result<jit::ModuleCounts> read_counts(const Injection& counting);

// Turns every counter site of counting cache `counting` off in place
// (jit/counting.h, counter_off_bytes), so that threads still running its
// copies (a loop entered before the phase ended) count no more. Page by page
// of the cache's code, a bounded number per stop window: each site that
// still holds counter code gets its 2 bytes in a copy of the page, and the
// page is written back whole, one write. The other bytes are the same, and
// no thread runs meanwhile; a dynid killed between windows leaves some sites
// counting, which is slower, never wrong. Sites under a thread's PC or
// across a page stay on. Returns how many are off now.
Result<std::size_t> counters_off(const Injection& counting);

// Puts back the original bytes of every patched entry whose live bytes are
// still dyni's jump, in one stop window. The cache stays mapped (I8).
// `one_window`: the stop is tried once, not five times 200 ms apart, and
// not at all when no entry holds dyni's jump (a counting phase's pauses,
// which may be skipped). An entry or call site where a uprobe attached
// after injection holds an int3, or wrote the file's byte back on its
// removal, gets the file's bytes around it, and its address in `under_int3`
// (and a warning in the log).
Status undo_patches(const Injection& injection, bool one_window = false, std::vector<uint64_t>* under_int3 = nullptr);
// Writes dyni's jump again where the live bytes are the original ones, after
// the same live checks as the first time (A/B benchmarks on one process);
// entries still patched count as patched. Returns what is patched and what
// was skipped, with reasons; `error` when it stopped early (some entries
// may be patched).
Result<Injection> redo_patches(const Injection& injection);
// The same for a counting cache paused by its own phase (counting_phase.h:
// its entries put back between bursts of counting), in one window: entries
// that must wait stay paused. Only the dynid running that phase calls it,
// before the phase ends: a counting cache found in a target, or ended, is
// never patched in again (redo_patches refuses it).
Result<Injection> resume_counting(const Injection& counting);

// The Injection a cache's record describes (a cache found in the target by
// cache_scan.h): undo and redo work from it alone.
Injection from_record(pid_t pid, uint64_t start_time, const CacheRecord& record);

}  // namespace dyni
