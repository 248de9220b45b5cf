// A target's further hot modules ([options] all_hot_modules, issue 22): once
// the hottest module is injected, before the target is `dynimized` (so that
// -undo never comes between two modules), each other module that holds at least
// kMinModuleShare of the samples and can be copied (module_choice.h) gets its
// own cache near it, laid out by the profile (the counting phase counted the
// first). Each is an injection of its own (injector.h): its own record, tied
// to its file by build-id and load address, its own frames registration and
// patches. One that fails is said and left, its patches undone: the target
// stays dynimized by the others. -undo and -redo act on every one; a
// restarted dynid, or a forked child, adopts every module's cache.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/log.h"
#include "common/paths.h"
#include "dynid/cache_plan.h"
#include "dynid/cache_scan.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/lifecycle.h"

namespace dyni {
namespace {

std::size_t patches_of(const Injection& in, PatchKind kind) {
  return static_cast<std::size_t>(
      std::count_if(in.patched.begin(), in.patched.end(), [&](const PatchRecord& p) { return p.kind == kind; }));
}

}  // namespace

void TargetLifecycle::inject_more_modules(Injection& first) {
  const profiler::Recorder* recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    recorder = recorder_.get();
  }
  for (const std::string& path : more_modules_) {
    if (stop_ || !recorder) return;
    const std::string file = std::string(paths::file_name(path));
    try {
      auto hot = module_profile(*recorder, path);
      if (!hot) {
        log::warn("target {} pid {}: {} not optimized: {}", name_, pid_, file, hot.error().message());
        continue;
      }
      InjectRequest request = base_request();
      request.module = path;  // the executable's path names it too (read_target_module)
      request.hot = hot->profile.hot_set(kHotSetShare);
      for (const auto& [start, samples] : hot->profile.functions) request.callers.push_back(start);
      request.profile = layout_profile(hot->profile);
      request.other_copies = first.copies;
      for (const Injection& earlier : more_)
        request.other_copies.insert(request.other_copies.end(), earlier.copies.begin(), earlier.copies.end());
      auto injected = inject_module(request);
      if (!injected) {
        log::warn("target {} pid {}: {} not optimized: {}", name_, pid_, file, injected.error().message());
        continue;
      }
      if (injected->error.empty() && injected->patched.empty())
        injected->error = "no entry could be patched" +
                          (injected->skipped.empty() ? std::string() : " (first reason: " + injected->skipped.front() + ")");
      if (!injected->error.empty() && !injected->patched.empty())
        if (auto undone = undo_patches(*injected); !undone) injected->error += "; undo failed too: " + undone.error().message();
      if (injected->error.empty())
        log::info("target {} pid {}: dynimized {} too: {} functions patched, {} call sites re-pointed, {} bytes of code "
                  "at {:#x}; {} patch windows, longest stop {:.1f} ms",
                  name_, pid_, file, patches_of(*injected, PatchKind::Entry), patches_of(*injected, PatchKind::CallSite),
                  injected->code_size, injected->code_addr, injected->patch_windows,
                  injected->longest_stop.count() / 1000.0);
      else
        log::warn("target {} pid {}: {} not optimized: {}; its cache stays mapped at {:#x}", name_, pid_, file,
                  injected->error, injected->cache.addr);
      std::lock_guard lock(injection_mutex_);
      // Threads may run in this cache from now on: every earlier cache's
      // stack proofs (-redo) need its frames (the later ones read its record).
      first.other_frames.push_back(injected->frames);
      for (Injection& earlier : more_) earlier.other_frames.push_back(injected->frames);
      more_.push_back(std::move(*injected));
    } catch (const std::exception& e) {  // a bug costs this module, not dynid its life
      log::warn("target {} pid {}: {} not optimized: internal error: {}", name_, pid_, file, e.what());
      continue;
    }
    if (more_.back().error.empty() && !more_.back().copies.empty()) {
      try {
        write_copy_files(more_.back(), "optimized", false);
      } catch (const std::exception& e) {  // files for people: never the target's state
        log::warn("target {} pid {}: perf map or origins of {}: {}", name_, pid_, file, e.what());
      }
    }
  }
}

void TargetLifecycle::adopt_more_modules(const std::vector<profiler::Mapping>& maps, const std::vector<CacheRecord>& all,
                                         const std::vector<CacheRecord>& records, const CacheRecord& first,
                                         const std::string& first_module, const std::string& exe,
                                         const std::string& build_id) {
  // Each other module's cache with the most live patches (a cache whose
  // injection failed may lie beside it).
  std::map<std::string, std::pair<const CacheRecord*, RecordModule>> by_module;
  std::map<std::string, std::size_t> live_of;
  for (const CacheRecord& r : records) {
    if (r.cache_addr == first.cache_addr) continue;
    auto module = module_of_record(pid_, maps, r, exe, build_id);
    if (!module || module->path == first_module) continue;
    const std::size_t live = live_patches(pid_, r.patches);
    auto it = by_module.find(module->path);
    if (it != by_module.end() && live_of[module->path] >= live) continue;
    by_module.insert_or_assign(module->path, std::make_pair(&r, *module));
    live_of[module->path] = live;
  }
  std::vector<Injection> adopted;
  for (const auto& [path, found] : by_module) {
    Injection in = from_record(pid_, start_time_, *found.first);
    in.module = found.second.path;
    in.module_inode = found.second.inode, in.module_load = found.second.load;
    for (const CacheRecord& r : all)
      if (r.cache_addr != found.first->cache_addr) in.other_frames.push_back(from_record(pid_, start_time_, r).frames);
    log::info("target {} pid {}: found dyni's cache of {} at {:#x} too: {} of its {} patches live", name_, pid_,
              paths::file_name(path), found.first->cache_addr, live_of[path], found.first->patches.size());
    adopted.push_back(std::move(in));
  }
  std::lock_guard lock(injection_mutex_);
  more_ = std::move(adopted);
}

Result<std::string> TargetLifecycle::undo_more_modules() {
  std::string said;
  for (const Injection& in : more_) {
    if (auto r = undo_patches(in); !r)
      return fail(fmt::format("{}: {}", paths::file_name(in.module), r.error().message()));
    said += fmt::format("; {} entries and {} call sites of {}", patches_of(in, PatchKind::Entry),
                        patches_of(in, PatchKind::CallSite), paths::file_name(in.module));
  }
  return said;
}

std::string TargetLifecycle::redo_more_modules(std::size_t& entries, std::size_t& calls) {
  std::string said;
  for (Injection& in : more_) {
    if (!in.error.empty()) continue;  // failed when injected: never patched again
    auto again = redo_patches(in);
    const std::string file(paths::file_name(in.module));
    if (!again || again->patched.empty()) {
      said += fmt::format("; {} not patched again: {}", file,
                          !again ? again.error().message() : again->error.empty() ? "no entry could be" : again->error);
      continue;
    }
    entries += patches_of(*again, PatchKind::Entry);
    calls += patches_of(*again, PatchKind::CallSite);
    in.patch_windows += again->patch_windows;
    if (again->longest_stop > in.longest_stop) in.longest_stop = again->longest_stop;
    said += fmt::format("; {} of {} entries of {}", patches_of(*again, PatchKind::Entry), patches_of(in, PatchKind::Entry),
                        file);
  }
  return said;
}

nlohmann::json TargetLifecycle::more_modules_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Injection& in : more_)
    out.push_back({{"module", in.module},
                   {"functions_patched", patches_of(in, PatchKind::Entry)},
                   {"call_sites_repointed", patches_of(in, PatchKind::CallSite)},
                   {"functions_copied", in.copies.size()},
                   {"cache", {{"addr", fmt::format("{:#x}", in.cache.addr)}, {"bytes", in.cache.length},
                              {"code_bytes", in.code_size}}},
                   {"frames_registered", in.frames_registered},
                   {"longest_stop_ms", in.longest_stop.count() / 1000.0},
                   {"skipped", in.skipped.size()},
                   {"error", in.error}});
  return out;
}

}  // namespace dyni
