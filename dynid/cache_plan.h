// The jit run for a profiled target (DESIGN.md §3, steps 4–6): the
// chosen module's hot set laid out into a code cache with its patch plan. Pure
// with respect to the target — it reads the module's file and the
// profile, never the process's memory. The plan is reported (-profile=PID,
// log); injection (injector.h) makes its own at the cache's real address.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "dynid/module_choice.h"
#include "jit/module_profile.h"
#include "jit/pipeline.h"
#include "profiler/recorder.h"

namespace dyni {

// The hot set: the functions that cover this share of the module's samples.
constexpr double kHotSetShare = 0.99;

// The optimized module's part of a finished profile: what the jit and the
// injector lay out by.
struct HotModule {
  std::string path;  // as the target maps it
  jit::ModuleProfile profile;
};
Result<HotModule> module_profile(const profiler::Recorder& recorder, const std::string& path);

// The share (percent) of `profile`'s hot-set samples in functions `in`
// copied: what -profile multiplies a module's share by.
double sampled_share_copied(const jit::ModuleProfile& profile, const struct Injection& in);

// A plan's summary for -profile and the log: functions, bytes, sampled CPU
// accepted, rejections by reason, the jit's seconds.
nlohmann::json plan_summary(const jit::ModulePlan& plan, const std::string& module, double seconds);

// Plans the cache for `pid`'s module at `path` (as choose_module chose it)
// from `recorder`'s profile and returns its summary. Only where nothing is injected (dynimize = false): an
// injection reports its own plan (Injection::plan), so the jit is not run
// twice on a loaded host. `options`: as an injection would plan.
Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder, const std::string& path,
                                       const jit::JitOptions& options);

}  // namespace dyni
