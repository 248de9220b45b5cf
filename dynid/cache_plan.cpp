// Choosing a target's module and running jit::optimize_module on it.
#include "dynid/cache_plan.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <set>

#include "dynid/injector.h"
#include "dynid/inject/frames_registration.h"
#include "dynid/inject/module_policy.h"
#include "dynid/inject/target_module.h"
#include "elf/elf_file.h"
#include "jit/cfg.h"
#include "jit/pipeline.h"

namespace dyni {

nlohmann::json plan_summary(const jit::ModulePlan& plan, const std::string& module, double seconds) {
  std::map<std::string, std::size_t> rejected;
  nlohmann::json kept_out = nlohmann::json::array();  // by policy, not for want of analysis: named one by one
  for (const jit::Rejection& r : plan.rejected) {
    const std::string kind = jit::reason_kind(r.reason);
    rejected[kind]++;
    if (kind == jit::kHoldsProbeSite || kind == jit::kKeptInPlace || kind == jit::kMakesSystemCall ||
        kind == jit::kNotALeaf) kept_out.push_back({{"function", r.name}, {"reason", r.reason}});
  }
  std::size_t patched = 0;
  for (const jit::CachedFunction& f : plan.cache.functions) patched += !f.patch.entries.empty();
  double share = plan.hot_samples ? 100.0 * static_cast<double>(plan.accepted_samples) / static_cast<double>(plan.hot_samples) : 0;
  return {{"module", module},
          {"functions", plan.cache.functions.size()},
          {"entries_patched", patched},
          {"cache_bytes", plan.cache.bytes.size()},
          {"sampled_cpu_accepted_percent", share},
          {"blocks_left_in_original", plan.blocks_left},
          {"rejected", rejected},
          {"kept_out", kept_out},
          {"seconds", seconds}};
}

Result<HotModule> module_profile(const profiler::Recorder& recorder, const std::string& path) {
  const auto& modules = recorder.symbolizer().modules();
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (modules[i].path == path && modules[i].functions)
      return HotModule{path, recorder.profile().module_profile(static_cast<int>(i))};
  return fail(path + " has no function table");
}

double sampled_share_copied(const jit::ModuleProfile& profile, const Injection& in) {
  std::set<uint64_t> copied;
  for (const CopyRange& c : in.copies) copied.insert(c.original_entry - in.module_bias);
  uint64_t hot = 0, got = 0;
  for (uint64_t start : profile.hot_set(kHotSetShare)) {
    auto f = profile.functions.find(start);
    uint64_t samples = f == profile.functions.end() ? 0 : f->second.samples;
    hot += samples;
    if (copied.contains(start)) got += samples;
  }
  return hot ? 100.0 * static_cast<double>(got) / static_cast<double>(hot) : 0;
}

Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder, const std::string& path,
                                       const jit::JitOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto hot = module_profile(recorder, path);
  if (!hot) return std::unexpected(hot.error());
  // The file as the process maps it, even if replaced or deleted on disk
  // (the executable's path names the executable).
  auto module = inject::read_target_module(pid, recorder.symbolizer(), path);
  if (!module) return std::unexpected(module.error());
  const jit::ModuleProfile& profile = hot->profile;
  const elf::FunctionTable& functions = *module->module->functions;
  // As the injection will plan it: with no unwinder loaded, libc's leaves only.
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  auto unwinder = inject::register_frame_function(pid, *maps, recorder.symbolizer());
  if (!unwinder) return std::unexpected(unwinder.error());
  if (auto fits = inject::fit_to_unwinder(*module, *unwinder); !fits) return std::unexpected(fits.error());
  auto input = inject::jit_input(*module, &profile, profile.hot_set(kHotSetShare), jit::provisional_cache_base(functions));
  if (!input) return std::unexpected(input.error());
  auto plan = jit::optimize_module(*input, options);  // the verifier stays on
  if (!plan) return std::unexpected(plan.error());
  return plan_summary(*plan, path, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace dyni
