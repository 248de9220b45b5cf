// A target's further hot modules ([options] all_hot_modules, issue 22): once
// the hottest module is injected, before the target is `dynimized` (so that
// -undo never comes between two modules), each other module that holds at least
// kMinModuleShare of the samples and can be copied (module_choice.h) gets its
// own cache near it. With counting, each first gets counting copies in the
// first's counting phase (count_more_modules), and its optimized copies are
// laid out by their counts and replace them; one that could not count is
// laid out by the profile. Each is an injection of its own (injector.h): its own record, tied
// to its file by build-id and load address, its own frames registration and
// patches. One that fails is said and left, its patches undone: the target
// stays dynimized by the others. -undo and -redo act on every one; a
// restarted dynid, or a forked child, adopts every module's cache.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/log.h"
#include "common/paths.h"
#include "dynid/cache_plan.h"
#include "dynid/cache_scan.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/gdb_symbols.h"
#include "dynid/lifecycle.h"

namespace dyni {
void TargetLifecycle::inject_more_modules(Injection& first) {
  if (following_) {  // a group's follower: its plan's further modules, no profile of its own
    inject_more_by_plan(first, *following_);
    return;
  }
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  if (!more_modules_.empty() && recorder) {
    std::string files;
    for (const std::string& path : more_modules_) files += (files.empty() ? "" : ", ") + std::string(paths::file_name(path));
    log::info("target {} pid {}: optimizing {} more module(s): {}", name_, pid_, more_modules_.size(), files);
  }
  for (const std::string& path : more_modules_) {
    if (stop_ || !recorder) return;
    const std::string file = std::string(paths::file_name(path));
    try {
      inject_one_more_module(first, *recorder, path);
    } catch (const std::exception& e) {  // a bug costs this module, not dynid its life
      log::warn("target {} pid {}: {} not optimized: internal error: {}", name_, pid_, file, e.what());
    }
  }
}

std::vector<std::string> TargetLifecycle::further_modules() const {
  if (!following_) return more_modules_;
  std::vector<std::string> out;
  for (const GroupPlan::Further& further : following_->more) out.push_back(further.module);
  return out;
}

InjectRequest TargetLifecycle::more_module_request(const HotModule& hot) const {
  InjectRequest request = base_request();
  request.module = hot.path;  // the executable's path names it too (read_target_module)
  request.hot = hot.profile.hot_set(kHotSetShare);
  for (const auto& [start, samples] : hot.profile.functions) request.callers.push_back(start);
  request.profile = layout_profile(hot.profile);
  return request;
}

const Injection* TargetLifecycle::counting_of(const std::string& module) const {
  std::lock_guard lock(counting_mutex_);
  return counting_ ? counting_->injection_of(module) : nullptr;  // caches_ stays as it is from count() on
}

void TargetLifecycle::count_more_modules(CountingPhase& phase) {
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  std::vector<CopyRange> copies = phase.injection().copies;  // a thread may be stopped in any of them
  for (const std::string& path : more_modules_) {
    if (stop_ || !recorder) return;
    try {
      count_one_more_module(phase, *recorder, path, copies);
    } catch (const std::exception& e) {  // a bug costs this module its counts, not dynid its life
      log::warn("target {} pid {}: counting: {} not counted: internal error: {}", name_, pid_, paths::file_name(path),
                e.what());
    }
  }
}

void TargetLifecycle::count_one_more_module(CountingPhase& phase, const profiler::Recorder& recorder,
                                            const std::string& path, std::vector<CopyRange>& copies) {
  const std::string file = std::string(paths::file_name(path));
  auto hot = module_profile(recorder, path);
  if (!hot) {
    log::info("target {} pid {}: counting: {} not counted (laid out by the profile if it can be): {}", name_, pid_,
              file, hot.error().message());
    return;
  }
  InjectRequest request = more_module_request(*hot);
  request.other_copies = copies;
  if (auto added = phase.add(request); !added) {
    log::info("target {} pid {}: counting: {} not counted (laid out by the profile if it can be): {}", name_, pid_,
              file, added.error().message());
    return;
  }
  const Injection* made = phase.injection_of(path);
  if (!made) return;
  copies.insert(copies.end(), made->copies.begin(), made->copies.end());
  log::info("target {} pid {}: counting: {} too: {} entries on counting copies, {} counter sites, {} bytes of code "
            "at {:#x}; {} patch windows, longest stop {:.1f} ms",
            name_, pid_, file, count_of(made->patched, PatchKind::Entry), made->counter_sites.size(), made->code_size, made->code_addr,
            made->patch_windows, made->longest_stop.count() / 1000.0);
}

void TargetLifecycle::inject_one_more_module(Injection& first, const profiler::Recorder& recorder,
                                             const std::string& path) {
  const std::string file = std::string(paths::file_name(path));
  auto hot = module_profile(recorder, path);
  if (!hot) {
    log::warn("target {} pid {}: {} not optimized: {}", name_, pid_, file, hot.error().message());
    return;
  }
  InjectRequest request = more_module_request(*hot);
  // Counted in the first's phase: laid out by its counts, each entry
  // re-pointed from its counting copy.
  std::string layout = request.profile ? "by profile (LBR edges)" : "original block order (no LBR)";
  auto counts = more_counts_.find(path);
  const Injection* counting = counts != more_counts_.end() ? counting_of(path) : nullptr;
  if (counting) {
    request.counts = &counts->second;
    request.hot = functions_that_ran(counts->second);
    request.profile = nullptr;
    request.replacing = counting;
    layout = fmt::format("by counts ({:.1f} s of counting copies)", counts->second.seconds);
  }
  if (add_more_module(first, request, layout, counting, &hot->profile) && counting)
    more_plans_.push_back({path, counts->second, request.hot, request.callers});  // for the group's plan
}

// A follower of its group's plan (process_group.h): each further module the
// member counted, that this one maps in the build counted, laid out by its
// counts. One that does not fit is said and passed over.
void TargetLifecycle::inject_more_by_plan(Injection& first, const GroupPlan& plan) {
  for (const GroupPlan::Further& further : plan.more) {
    // -undo of the group answered while this member was dynimizing: it is
    // undone once settled (daemon.h keep_groups_undone); no more patches.
    if (stop_ || table_.group_undone(group_)) return;
    const std::string file = std::string(paths::file_name(further.module));
    try {
      if (std::string why = why_module_does_not_fit(further.module, further.counts.build_id); !why.empty()) {
        log::info("target {} pid {}: {} not optimized: its group's plan for it does not fit ({})", name_, pid_, file, why);
        continue;
      }
      InjectRequest request = base_request();
      request.module = further.module;
      request.hot = further.hot;
      request.callers = further.callers;
      request.counts = &further.counts;
      const std::string layout = fmt::format("by counts of pid {}, its group's plan ({:.1f} s of counting copies)",
                                             plan.counted_in, further.counts.seconds);
      add_more_module(first, request, layout, nullptr, nullptr);
    } catch (const std::exception& e) {  // a bug costs this module, not dynid its life
      log::warn("target {} pid {}: {} not optimized: internal error: {}", name_, pid_, file, e.what());
    }
  }
}

// Injects a further module's cache (`request`, for its hot set) after the
// first and those before it; keeps it for -undo at once. `counting`: its
// counting cache, which it replaces; `sampled`: its profile, for the share
// of sampled CPU copied (none for a follower). Whether it went in.
bool TargetLifecycle::add_more_module(Injection& first, InjectRequest& request, const std::string& layout,
                                      const Injection* counting, const jit::ModuleProfile* sampled) {
  const std::string file = std::string(paths::file_name(request.module));
  // A thread may be stopped in any earlier cache's copies (the counting
  // copies' too, still looping).
  for (const std::vector<CopyRange>* copies : {&first.copies, &first.other_copies})
    request.other_copies.insert(request.other_copies.end(), copies->begin(), copies->end());
  for (const Injection& earlier : more_)
    request.other_copies.insert(request.other_copies.end(), earlier.copies.begin(), earlier.copies.end());
  // Every other module copied, before it or after: their calls to its hot
  // functions through their PLTs reach its copies (inject/got_repoint.h).
  // (One whose injection failed, or is still to come, calls through its PLT
  // all the same.)
  std::vector<std::string> holders = further_modules();
  holders.push_back(first.module);
  for (const std::string& holder : holders)
    if (holder != request.module) request.slot_holders.push_back(holder);
  auto injected = inject_module(request);
  if (!injected) {
    log::warn("target {} pid {}: {} not optimized: {}", name_, pid_, file, injected.error().message());
    return false;
  }
  if (counting) replaced_counting(*injected, *counting);
  // Laid out by the profile, or in its original order without LBR (the
  // plan then saw no samples): the share copied is the lifecycle's count.
  injected->plan["sampled_cpu_accepted_percent"] =
      sampled ? nlohmann::json(sampled_share_copied(*sampled, *injected)) : nlohmann::json(nullptr);
  if (injected->error.empty() && count_of(injected->patched, PatchKind::Entry) == 0)  // pads alone reach nothing
    injected->error = "no entry could be patched" + first_reason(injected->skipped);
  // Kept at once, whatever follows: -undo reaches its patches from here on.
  // Threads may run in this cache from now on: every earlier cache's stack
  // proofs (-redo) need its frames (the later ones read its record).
  std::size_t at = 0;
  {
    std::lock_guard lock(injection_mutex_);
    first.other_frames.push_back(injected->frames);
    for (Injection& earlier : more_) earlier.other_frames.push_back(injected->frames);
    more_layouts_[injected->cache.addr] = layout;
    more_.push_back(std::move(*injected));
    at = more_.size() - 1;
  }
  Injection& in = more_[at];  // this thread alone changes more_
  if (!in.error.empty()) {
    std::string error = in.error;
    if (!in.patched.empty())
      if (auto undone = undo_patches(in); !undone) error += "; undo failed too: " + undone.error().message();
    {
      std::lock_guard lock(injection_mutex_);
      in.error = error;
    }
    log::warn("target {} pid {}: {} not optimized: {}; its cache stays mapped at {:#x}", name_, pid_, file, error,
              in.cache.addr);
    return false;
  }
  log::info("target {} pid {}: dynimized {} too: {} functions patched, {} call sites and {} other modules' GOT slots "
            "re-pointed, {} bytes of code at {:#x} laid out {}; {} patch windows, longest stop {:.1f} ms",
            name_, pid_, file, count_of(in.patched, PatchKind::Entry), count_of(in.patched, PatchKind::CallSite),
            in.slots_patched.size(), in.code_size, in.code_addr, layout, in.patch_windows, in.longest_stop.count() / 1000.0);
  if (in.copies.empty()) return true;
  try {
    write_copy_files(in, "optimized", false);  // appended to the perf map and origins
    auto gdb = save_cache_symbol_file(in, "optimized", "-" + file);
    if (!gdb) log::warn("target {} pid {}: gdb's symbol file of {}: {}", name_, pid_, file, gdb.error().message());
    std::lock_guard lock(injection_mutex_);
    if (gdb) more_gdb_commands_[in.cache.addr] = *gdb;
  } catch (const std::exception& e) {  // files for people: never the target's state
    log::warn("target {} pid {}: perf map, origins or gdb file of {}: {}", name_, pid_, file, e.what());
  }
  return true;
}

namespace {

// The file mapping that holds every patch of `record` still mapped (its
// inode and load address, start - offset), or none: none mapped, or in more
// than one (a record whose module could not be matched is then left alone).
struct PatchedMapping {
  uint64_t dev = 0, inode = 0, load = 0;
  auto operator<=>(const PatchedMapping&) const = default;
};
std::optional<PatchedMapping> the_mapping_patched(const std::vector<profiler::Mapping>& maps, const CacheRecord& record) {
  std::set<PatchedMapping> held;
  for (const PatchRecord& p : record.patches)
    for (const profiler::Mapping& m : maps)
      if (m.executable && m.file_backed() && m.start <= p.addr && p.addr < m.end)
        held.insert({m.dev, m.inode, m.start - m.offset});
  if (held.size() != 1) return std::nullopt;
  return *held.begin();
}

}  // namespace

std::size_t TargetLifecycle::adopt_more_modules(const std::vector<profiler::Mapping>& maps,
                                                const std::vector<CacheRecord>& all,
                                                const std::vector<FoundRecord>& found, const FoundRecord& first) {
  // For each other module, its cache with the most live patches (a failed
  // injection's may lie beside it); a record whose module could not be
  // matched, with live patches all in one file mapping, is adopted for
  // -undo alone, tied to that mapping.
  std::map<std::string, const FoundRecord*> by_module;
  std::vector<const FoundRecord*> unmatched;
  for (const FoundRecord& f : found) {
    if (&f == &first || (f.module && f.module->path == first.module->path)) continue;
    if (!f.module) {
      if (f.live) unmatched.push_back(&f);
      continue;
    }
    const FoundRecord*& kept = by_module[f.module->path];
    if (!kept || f.live > kept->live) kept = &f;
  }
  auto adopt = [&](const FoundRecord& f, std::string error) {
    Injection in = from_record(pid_, start_time_, *f.record);
    if (f.module) {
      in.module = f.module->path, in.module_inode = f.module->inode, in.module_load = f.module->load;
      in.module_dev = f.module->dev;
    }
    in.error = std::move(error);
    for (const CacheRecord& r : all)
      if (r.cache_addr != f.record->cache_addr) in.other_frames.push_back(from_record(pid_, start_time_, r).frames);
    log::info("target {} pid {}: found dyni's cache of {} at {:#x} too: {} of its {} patches live{}", name_, pid_,
              f.module ? std::string(paths::file_name(f.module->path)) : "an unknown module", f.record->cache_addr,
              f.live, f.record->patches.size(), in.error.empty() ? "" : " (" + in.error + ")");
    return in;
  };
  std::vector<Injection> adopted;
  std::size_t live = 0;
  for (const auto& [path, f] : by_module) {
    // With nothing live, it may be a failed injection's: never patched again.
    adopted.push_back(adopt(*f, f->live ? "" : "found with no live patch: -redo leaves it as it is"));
    live += f->live;
  }
  for (const FoundRecord* f : unmatched) {
    auto mapping = the_mapping_patched(maps, *f->record);
    if (!mapping) {
      log::warn("target {} pid {}: dyni's cache at {:#x} has {} live patches in no single file mapping and matches no "
                "module: left alone", name_, pid_, f->record->cache_addr, f->live);
      continue;
    }
    Injection in = adopt(*f, "its module could not be matched to its record: -undo restores its live patches, "
                             "-redo leaves it");
    // undo writes only into that mapping
    in.module_dev = mapping->dev, in.module_inode = mapping->inode, in.module_load = mapping->load;
    adopted.push_back(std::move(in));
    live += f->live;
  }
  std::lock_guard lock(injection_mutex_);
  more_ = std::move(adopted);
  return live;
}

std::string TargetLifecycle::undo_more_modules(std::vector<std::string>& failed) {
  std::string said;
  for (const Injection& in : more_) {
    const std::string file = in.module.empty() ? "an unknown module" : std::string(paths::file_name(in.module));
    if (auto r = undo_patches(in); !r) {
      failed.push_back(fmt::format("{}: {}", file, r.error().message()));
      continue;
    }
    said += fmt::format("; {} entries, {} call sites and {} GOT slots of {}", count_of(in.patched, PatchKind::Entry),
                        count_of(in.patched, PatchKind::CallSite), in.slots_patched.size(), file);
  }
  return said;
}

std::string TargetLifecycle::redo_more_modules(std::size_t& entries, std::size_t& calls) {
  std::string said;
  for (Injection& in : more_) {
    if (!in.error.empty()) continue;  // failed when injected: never patched again
    auto again = redo_patches(in);
    const std::string file(paths::file_name(in.module));
    if (!again || count_of(again->patched, PatchKind::Entry) == 0) {
      said += fmt::format("; {} not patched again: {}", file,
                          !again ? again.error().message() : again->error.empty() ? "no entry could be" : again->error);
      continue;
    }
    entries += count_of(again->patched, PatchKind::Entry);
    calls += count_of(again->patched, PatchKind::CallSite);
    in.patch_windows += again->patch_windows;
    if (again->longest_stop > in.longest_stop) in.longest_stop = again->longest_stop;
    said += fmt::format("; {} of {} entries of {}", count_of(again->patched, PatchKind::Entry), count_of(in.patched, PatchKind::Entry),
                        file);
  }
  return said;
}

nlohmann::json TargetLifecycle::more_modules_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Injection& in : more_)
    out.push_back({{"module", in.module},
                   {"module_loaded", library_loaded(in)},
                   {"gdb_command", more_gdb_commands_.count(in.cache.addr) ? nlohmann::json(more_gdb_commands_.at(in.cache.addr))
                                                                           : nlohmann::json(nullptr)},
                   {"functions_patched", count_of(in.patched, PatchKind::Entry)},
                   {"call_sites_repointed", count_of(in.patched, PatchKind::CallSite)},
                   {"got_slots_repointed", in.slots_patched.size()},
                   {"functions_copied", in.copies.size()},
                   {"layout", more_layouts_.count(in.cache.addr) ? nlohmann::json(more_layouts_.at(in.cache.addr))
                                                                 : nlohmann::json(nullptr)},
                   {"cache", {{"addr", fmt::format("{:#x}", in.cache.addr)}, {"bytes", in.cache.length},
                              {"code_bytes", in.code_size}}},
                   {"frames_registered", in.frames_registered},
                   {"longest_stop_ms", in.longest_stop.count() / 1000.0},
                   {"skipped", in.skipped.size()},
                   {"error", in.error}});
  return out;
}

}  // namespace dyni
