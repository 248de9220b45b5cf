// dyni-inject PID SECONDS [--undo-after SECONDS | --commands]: profiles a
// live process's executable for SECONDS the way dynid does, then injects its
// hot set (99 % of the executable's samples) with dynid/injector.h, prints
// what it did, and with --undo-after puts the entries back after that long.
// DYNI_MODULE=liblzma profiles and injects the library whose file name
// starts so instead of the executable (libc, ld.so, libgcc_s are refused);
// DYNI_HOT_FRACTION=0.5 injects the functions that cover half the samples;
// blocks are laid out as dynid does (by profile only with LBR edges);
// DYNI_ORIGINAL_ORDER=1 forces their original order, =0 the profile's.
// With --commands it then reads "undo", "redo" and "quit" lines on stdin and
// answers each with "ok" (bench/injection_ab.sh alternates with it).
// DYNI_COUNTING=SECONDS first injects counting copies of the hot set
// (jit/counting.h), lets them count for SECONDS, reads the counts (saved to
// DYNI_COUNTS_FILE when set), puts the original entries back, and then
// turns the counters off in place, and injects the functions that ran,
// laid out by their counts. DYNI_COUNTER_STRIPES=N stripes the counters
// for N CPUs (0: shared, the default), DYNI_VALUE_COUNTERS=0 leaves out
// the value code at indirect calls, DYNI_PROMOTE=0 promotes no indirect
// call (jit/promotion.h), DYNI_LIFT_THP=0 leaves a target that turned THP
// off for itself on small pages (dynid/cache_huge_pages.h), DYNI_COUNTER_SET=every puts a
// counter at every block (for measuring those levers). A tool for
// measuring live injection before dynid's lifecycle runs it; it changes the
// target's code: run it on test and benchmark processes only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <span>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/cpu_features.h"
#include "dynid/injector.h"
#include "dynid/proc_reader.h"
#include "dynid/target_memory.h"
#include "dynid/world_stop.h"
#include "elf/elf_file.h"
#include "profiler/process_maps.h"
#include "profiler/profile.h"
#include "profiler/recorder.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"

namespace {

using namespace dyni;

// The module to profile and inject: the executable, or with DYNI_MODULE=NAME
// the library whose file name starts with NAME (the first one mapped).
int chosen_module(const profiler::Symbolizer& symbols, pid_t pid) {
  const char* wanted = std::getenv("DYNI_MODULE");
  auto exe = read_exe("/proc", pid);
  for (std::size_t i = 0; exe && i < symbols.modules().size(); ++i) {
    const std::string& path = symbols.modules()[i].path;
    const std::string name = path.substr(path.rfind('/') + 1);
    if (wanted ? path != exe->path && name.starts_with(wanted) : path == exe->path) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

// perf's map for JIT code (/tmp/perf-PID.map), so that `perf report` names
// the copies: "dyni:<function>", and counting copies "dyni-count:<function>"
// (written first, then the optimized ones appended).
void write_perf_map(pid_t pid, const std::vector<dyni::CopyRange>& copies, bool counting, bool append) {
  std::string path = "/tmp/perf-" + std::to_string(pid) + ".map";
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f) return;
  for (const dyni::CopyRange& c : copies)
    std::fprintf(f, "%llx %llx %s:%s\n", static_cast<unsigned long long>(c.cache_addr),
                 static_cast<unsigned long long>(c.size), counting ? "dyni-count" : "dyni", c.name.c_str());
  std::fclose(f);
}

// DYNI_EXPERIMENT_VTABLES=1, for benchmarks only: function pointers to the
// copied functions found in the executable's .data.rel.ro (vtables, mostly)
// are pointed at the copies in a stop window, and back on undo, so that
// virtual calls reach copies without the hop through the original entry.
// dynid does not do this (its record has no place for these slots, and code
// that compares such pointers would see different ones).
struct SlotPatch {
  uint64_t addr = 0, original = 0, copy = 0;
};

std::vector<SlotPatch> pointer_slots(pid_t pid, const std::vector<dyni::CopyRange>& copies) {
  using namespace dyni;
  std::map<uint64_t, uint64_t> copy_of;
  for (const CopyRange& c : copies) copy_of[c.original_entry] = c.cache_addr;
  auto file = elf::ElfFile::open(fmt::format("/proc/{}/exe", pid));
  auto exe = read_exe("/proc", pid);
  auto maps = profiler::read_maps(pid);
  if (!file || !exe || !maps) return {};
  uint64_t bias = 0;
  for (const auto& m : *maps)
    if (m.path == exe->path && m.offset == 0) { bias = file->is_pie() ? m.start : 0; break; }
  const elf::Section* relro = file->find_section(".data.rel.ro");
  if (!relro) return {};
  auto bytes = read_target(pid, relro->addr + bias, relro->size);
  if (!bytes) return {};
  std::vector<SlotPatch> out;
  for (std::size_t at = 0; at + 8 <= bytes->size(); at += 8) {
    uint64_t v;
    std::memcpy(&v, bytes->data() + at, 8);
    if (auto c = copy_of.find(v); c != copy_of.end()) out.push_back({relro->addr + bias + at, v, c->second});
  }
  return out;
}

bool write_slots(pid_t pid, const std::vector<SlotPatch>& slots, bool to_copies) {
  using namespace dyni;
  auto w = WorldStop::stop(pid, std::chrono::milliseconds(200));
  if (!w) return false;
  auto maps = profiler::read_maps(pid);
  WindowMemory memory(pid);
  bool all = maps.has_value();
  for (const SlotPatch& s : slots) {
    const profiler::Mapping* m = maps ? mapping_at(*maps, s.addr) : nullptr;
    uint64_t v = to_copies ? s.copy : s.original;
    auto bytes = std::span(reinterpret_cast<const uint8_t*>(&v), 8);
    all = all && m && memory.write_in_mapping(*m, s.addr, bytes).has_value();
  }
  w->resume();
  return all;
}

// The functions that ran while counting.
std::vector<uint64_t> ran(const dyni::jit::ModuleCounts& counts) {
  std::vector<uint64_t> out;
  for (const auto& [entry, c] : counts.functions)
    if (std::any_of(c.blocks.begin(), c.blocks.end(), [](const auto& b) { return b.second > 0; })) out.push_back(entry);
  return out;
}

// DYNI_COUNTING: counting copies of the hot set for `seconds`, then their
// counts, with the target back on its original entries.
dyni::Result<dyni::jit::ModuleCounts> count_for(dyni::InjectRequest request, double seconds) {
  using namespace dyni;
  request.options.cache.counting = true;
  const char* stripes = std::getenv("DYNI_COUNTER_STRIPES");
  request.options.cache.counter_stripes = stripes ? static_cast<uint32_t>(std::atoi(stripes)) : 0;
  if (request.options.cache.counter_stripes && !cpu_has_rdpid()) return fail("striped counters need rdpid");
  // DYNI_COUNTER_SET=every: a counter at every block (the fewest that tell every count, by default).
  const char* set = std::getenv("DYNI_COUNTER_SET");
  if (set && std::string(set) == "every") request.options.cache.counter_set = jit::CounterSet::Every;
  // DYNI_VALUE_COUNTERS=0: no value code at indirect calls (what it costs, measured).
  if (const char* v = std::getenv("DYNI_VALUE_COUNTERS"); v && std::string(v) == "0")
    request.options.cache.count_values = false;
  // DYNI_COUNTING_CALLS_COPIES=1: counting copies call each other directly (a measurement of the entry hop).
  if (const char* v = std::getenv("DYNI_COUNTING_CALLS_COPIES"); v && std::string(v) == "1")
    request.options.cache.counting_calls_copies = true;
  auto counting = inject_module(request);
  if (!counting) return std::unexpected(counting.error());
  write_perf_map(request.pid, counting->copies, true, false);
  std::fprintf(stderr, "counting: %zu entries patched, %zu counter sites, %llu bytes of code, counters at %#llx "
               "(%u stripes)\n", count_of(counting->patched, PatchKind::Entry), counting->counter_sites.size(),
               static_cast<unsigned long long>(counting->code_size),
               static_cast<unsigned long long>(counting->counters.addr), counting->counter_layout.stripes);
  if (!counting->error.empty()) {
    (void)undo_patches(*counting);
    return fail("counting cache: " + counting->error);
  }
  // DYNI_COUNTERS_OFF_FIRST=1 (a measurement): every site off at once, so
  // that the phase runs the counting copies without counting.
  if (const char* v = std::getenv("DYNI_COUNTERS_OFF_FIRST"); v && std::string(v) == "1") (void)counters_off(*counting);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto counts = read_counts(*counting);
  if (auto undone = undo_patches(*counting); !undone) return fail("undo of the counting entries: " + undone.error().message());
  if (!counts) return std::unexpected(counts.error());
  // Threads that stay in a counting copy (a loop entered while counting) count no more.
  auto off = counters_off(*counting);
  std::fprintf(stderr, "counting: %s\n", off ? fmt::format("{} of {} counter sites turned off", *off,
                                                             counting->counter_sites.size()).c_str()
                                              : ("counters not turned off: " + off.error().message()).c_str());
  counts->seconds = seconds;
  if (const char* path = std::getenv("DYNI_COUNTS_FILE")) {
    std::FILE* f = std::fopen(path, "w");
    if (f) std::fprintf(f, "%s\n", counts->to_json().dump().c_str()), std::fclose(f);
  }
  std::fprintf(stderr, "counting: %zu of %zu functions ran\n", ran(*counts).size(), counts->functions.size());
  return counts;
}

int main(int argc, char** argv) {
  bool commands = argc == 4 && std::string(argv[3]) == "--commands";
  if (argc != 3 && !commands && !(argc == 5 && std::string(argv[3]) == "--undo-after")) {
    std::fprintf(stderr, "usage: dyni-inject PID SECONDS [--undo-after SECONDS | --commands]\n");
    return 2;
  }
  pid_t pid = std::atoi(argv[1]);
  auto symbols = profiler::Symbolizer::for_process(pid);
  auto sampler = symbols ? profiler::Sampler::attach(pid, profiler::SamplerOptions{}) : std::unexpected(symbols.error());
  if (!sampler) {
    std::fprintf(stderr, "dyni-inject: %s\n", sampler.error().message().c_str());
    return 1;
  }
  profiler::Profile profile(&*symbols);
  (void)profiler::sample_for(*sampler, profile, std::chrono::seconds(std::atoi(argv[2])));
  sampler->stop();  // no sampling while the benchmarks run
  int module = chosen_module(*symbols, pid);
  if (module < 0) {
    std::fprintf(stderr, "dyni-inject: no module %s is mapped\n", std::getenv("DYNI_MODULE") ?: "(the executable)");
    return 1;
  }
  jit::ModuleProfile mp = profile.module_profile(module);
  // DYNI_HOT_FRACTION (default 0.99): the share of the executable's samples
  // the injected functions cover (benchmarks vary it).
  const char* fraction = std::getenv("DYNI_HOT_FRACTION");
  // Blocks laid out as dynid lays them out (layout_profile); DYNI_ORIGINAL_ORDER
  // =1 forces the original order, =0 the profile's.
  InjectRequest request;
  request.pid = pid;
  if (std::getenv("DYNI_MODULE")) request.module = symbols->modules()[static_cast<std::size_t>(module)].path;
  request.hot = mp.hot_set(fraction ? std::atof(fraction) : 0.99);
  request.profile = layout_profile(mp);
  if (const char* original = std::getenv("DYNI_ORIGINAL_ORDER"))
    request.profile = std::string(original) == "1" ? nullptr : &mp;
  // DYNI_ENTRIES=all patches every entry; =differs only those whose copy
  // differs from its original (jit::EntryPolicy).
  if (const char* entries = std::getenv("DYNI_ENTRIES"))
    request.options.cache.entries =
        std::string(entries) == "differs" ? jit::EntryPolicy::WhenTheCopyDiffers : jit::EntryPolicy::All;
  // DYNI_NEAR_BRANCHES=1: every branch of the copies rel32 (jit::CacheOptions).
  if (const char* near = std::getenv("DYNI_NEAR_BRANCHES"); near && std::string(near) == "1")
    request.options.cache.short_branches = false;
  // DYNI_FUNCTION_ALIGN=16|32: copies start on that boundary (64 by default).
  if (const char* align = std::getenv("DYNI_FUNCTION_ALIGN")) {
    const int a = std::atoi(align);
    if (a != 16 && a != 32 && a != 64 && a != 128) {
      std::fprintf(stderr, "dyni-inject: DYNI_FUNCTION_ALIGN must be 16, 32, 64 or 128, not '%s'\n", align);
      return 2;
    }
    request.options.cache.function_alignment = static_cast<uint64_t>(a);
  }
  // DYNI_LOOP_ALIGN=0|16|32|64: hot loop tops on that boundary (jit/block_layout.h; 0: none).
  if (const char* align = std::getenv("DYNI_LOOP_ALIGN")) {
    const int a = std::atoi(align);
    if (std::string(align) != "0" && a != 16 && a != 32 && a != 64) {
      std::fprintf(stderr, "dyni-inject: DYNI_LOOP_ALIGN must be 0, 16, 32 or 64, not '%s'\n", align);
      return 2;
    }
    request.options.layout.loop_alignment = static_cast<unsigned>(a);
  }
  // DYNI_PROMOTE=0: no indirect call promoted (jit/promotion.h), for measuring that lever.
  if (const char* promote = std::getenv("DYNI_PROMOTE"); promote && std::string(promote) == "0")
    request.options.cache.promote_calls = false;
  // Direct calls from the sampled functions left in the original code go
  // straight to the copies, as dynid does; DYNI_CALL_SITES=0: through the
  // entries' jumps, for measuring that lever (jit/call_sites.h).
  if (const char* v = std::getenv("DYNI_CALL_SITES"); !v || std::string(v) != "0")
    for (const auto& [start, samples] : mp.functions) request.callers.push_back(start);
  // DYNI_LIFT_THP=0: small pages in a target that turned THP off, for measuring huge pages.
  if (const char* lift = std::getenv("DYNI_LIFT_THP"); lift && std::string(lift) == "0") request.lift_thp = false;
  jit::ModuleCounts counts;
  if (const char* counting = std::getenv("DYNI_COUNTING")) {
    auto counted = count_for(request, std::atof(counting));
    if (!counted) {
      std::fprintf(stderr, "dyni-inject: counting: %s\n", counted.error().message().c_str());
      return 1;
    }
    counts = std::move(*counted);
    request.counts = &counts;
    request.hot = ran(counts);
    request.profile = nullptr;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto injected = inject_module(request);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!injected) {
    std::fprintf(stderr, "dyni-inject: %s\n", injected.error().message().c_str());
    return 1;
  }
  std::printf("%s: %llu samples; %zu hot functions; %zu entries patched, %zu call sites re-pointed, %zu skipped; "
              "cache %#llx, %llu bytes of code; longest patch window %lld us; %.2f s\n",
              mp.module.c_str(), static_cast<unsigned long long>(mp.total_samples), request.hot.size(),
              count_of(injected->patched, PatchKind::Entry), count_of(injected->patched, PatchKind::CallSite),
              injected->skipped.size(), static_cast<unsigned long long>(injected->code_addr),
              static_cast<unsigned long long>(injected->code_size),
              static_cast<long long>(injected->longest_stop.count()), seconds);
  const WindowTiming& w = injected->longest_window;
  // Details go to stderr: stdout carries one summary line, then answers.
  std::fprintf(stderr, "longest patch window: %zu threads, %zu entries written; stop %lld us, unwind %lld us, checks %lld us, "
              "writes %lld us, release %lld us\n", w.threads, w.writes, static_cast<long long>(w.stop.count()),
              static_cast<long long>(w.unwind.count()), static_cast<long long>(w.check.count()),
              static_cast<long long>(w.write.count()), static_cast<long long>(w.release.count()));
  for (const std::string& s : injected->skipped) std::fprintf(stderr, "  skipped %s\n", s.c_str());
  write_perf_map(pid, injected->copies, false, std::getenv("DYNI_COUNTING") != nullptr);
  if (!injected->error.empty()) std::fprintf(stderr, "stopped early: %s\n", injected->error.c_str());
  std::vector<SlotPatch> slots;
  if (const char* v = std::getenv("DYNI_EXPERIMENT_VTABLES"); v && std::string(v) == "1") {
    slots = pointer_slots(pid, injected->copies);
    bool written = write_slots(pid, slots, true);
    std::fprintf(stderr, "experiment: %zu function pointers in .data.rel.ro point at copies%s\n", slots.size(),
                 written ? "" : " (some writes failed)");
  }
  std::fflush(stdout);
  for (std::string line; commands && std::getline(std::cin, line) && line != "quit";) {
    std::string answer = "ok";
    if (!slots.empty() && !write_slots(pid, slots, line != "undo")) answer = "function pointers not all written";
    if (line == "undo") {
      if (auto r = undo_patches(*injected); !r) answer = r.error().message();
    } else if (auto r = redo_patches(*injected); !r) {
      answer = r.error().message();
    } else if (r->patched.size() != injected->patched.size()) {
      answer = fmt::format("redo patched {} of {} entries; first skipped: {}", r->patched.size(),
                           injected->patched.size(), r->skipped.empty() ? "" : r->skipped.front());
    }
    std::printf("%s\n", answer.c_str());
    std::fflush(stdout);
  }
  if (argc == 5) {
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[4])));
    if (!slots.empty()) write_slots(pid, slots, false);
    if (auto r = undo_patches(*injected); !r) {
      std::fprintf(stderr, "dyni-inject: undo: %s\n", r.error().message().c_str());
      return 1;
    }
    std::printf("undone\n");
  }
  return 0;
}
