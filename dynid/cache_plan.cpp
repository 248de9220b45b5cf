// Running jit::optimize_module on a target's executable.
#include "dynid/cache_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "dynid/proc_reader.h"
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
    if (kind == jit::kHoldsProbeSite) kept_out.push_back({{"function", r.name}, {"reason", r.reason}});
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

Result<ExecutableProfile> executable_profile(pid_t pid, const profiler::Recorder& recorder) {
  auto exe = read_exe("/proc", pid);
  if (!exe) return std::unexpected(exe.error());
  const auto& modules = recorder.symbolizer().modules();
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (modules[i].path == exe->path && modules[i].functions)
      return ExecutableProfile{exe->path, recorder.profile().module_profile(static_cast<int>(i))};
  return fail("executable " + exe->path + " has no function table");
}

std::vector<std::pair<std::string, double>> module_shares(const profiler::Profile& profile,
                                                          const profiler::Symbolizer& symbolizer) {
  std::map<int, uint64_t> by_module;
  for (const auto& [key, f] : profile.functions()) by_module[key.first] += f.samples;
  std::vector<std::pair<std::string, double>> shares;
  const auto& modules = symbolizer.modules();
  for (const auto& [index, samples] : by_module)
    if (index >= 0 && static_cast<std::size_t>(index) < modules.size() && profile.total() > 0)
      shares.emplace_back(modules[static_cast<std::size_t>(index)].path,
                          static_cast<double>(samples) / static_cast<double>(profile.total()));
  if (profile.total() > 0 && profile.outside_modules() > 0)
    shares.emplace_back(kOutsideModules, static_cast<double>(profile.outside_modules()) /
                                             static_cast<double>(profile.total()));
  std::stable_sort(shares.begin(), shares.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return shares;
}

std::string outside_executable(const std::vector<std::pair<std::string, double>>& shares, const std::string& exe_path) {
  double exe = 0;
  for (const auto& [path, share] : shares)
    if (path == exe_path) exe += share;
  if (exe >= kMinExecutableShare) return "";
  for (const auto& [path, share] : shares)
    if (path != exe_path)
      return fmt::format("{:.0f} % of samples in {}, which dyni does not optimize (it optimizes the executable, "
                         "which holds {:.2f} %)", 100 * share, path, 100 * exe);
  return fmt::format("the executable holds {:.2f} % of samples, and no module holds more", 100 * exe);
}

Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder, const jit::JitOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto exe = executable_profile(pid, recorder);
  if (!exe) return std::unexpected(exe.error());
  const profiler::Module* module = nullptr;
  for (const auto& m : recorder.symbolizer().modules())
    if (m.path == exe->path && m.functions) module = &m;
  // The file as the process maps it, even if replaced or deleted on disk.
  auto file = elf::ElfFile::open(fmt::format("/proc/{}/exe", pid));
  if (!file) return std::unexpected(file.error());
  const jit::ModuleProfile& profile = exe->profile;
  const elf::FunctionTable& functions = *module->functions;
  jit::ModuleImage image(*file);
  jit::ModuleInput input{&functions, &image, &profile, profile.hot_set(kHotSetShare), jit::provisional_cache_base(functions), {}, {}, 0};
  jit::use_unwind_info(input, *file);
  if (auto probes = jit::use_probe_sites(input, *file); !probes) return std::unexpected(probes.error());
  auto plan = jit::optimize_module(input, options);  // the verifier stays on
  if (!plan) return std::unexpected(plan.error());
  return plan_summary(*plan, exe->path,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace dyni
