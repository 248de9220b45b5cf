// The jit run for a profiled target (DESIGN.md §3, steps 4–6): the
// executable's hot set laid out into a code cache with its patch plan. Pure
// with respect to the target — it reads the executable's file and the
// profile, never the process's memory. The plan is reported (-profile=PID,
// log); injection (injector.h) makes its own at the cache's real address.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "jit/module_profile.h"
#include "jit/pipeline.h"
#include "profiler/recorder.h"

namespace dyni {

// The hot set: the functions that cover this share of the executable's samples.
constexpr double kHotSetShare = 0.99;

// The executable's part of a finished profile: what the jit and the injector
// lay out by.
struct ExecutableProfile {
  std::string path;
  jit::ModuleProfile profile;
};
Result<ExecutableProfile> executable_profile(pid_t pid, const profiler::Recorder& recorder);

// dyni optimizes a target's executable alone: one whose executable holds
// less than this share of the samples (its hot code in shared libraries:
// the sqlite3 CLI, xz) is not worth a cache.
constexpr double kMinExecutableShare = 0.01;

// Each module's share of a profile's user samples in its functions (of all
// user samples), hottest first; code outside any module (a JIT's, anonymous)
// as kOutsideModules. Samples in a module but outside its functions count
// for none.
inline constexpr const char* kOutsideModules = "code outside any module (a JIT's or anonymous memory)";
std::vector<std::pair<std::string, double>> module_shares(const profiler::Profile& profile,
                                                          const profiler::Symbolizer& symbolizer);

// Why the target with executable `exe_path` is not optimized, by module
// ("97 % of samples in /usr/lib/.../libsqlite3.so.0.8.6, which dyni does not
// optimize; the executable holds 0.4 %"), or "" when its executable holds
// at least kMinExecutableShare. Pure; unit-tested.
std::string outside_executable(const std::vector<std::pair<std::string, double>>& shares, const std::string& exe_path);

// A plan's summary for -profile and the log: functions, bytes, sampled CPU
// accepted, rejections by reason, the jit's seconds.
nlohmann::json plan_summary(const jit::ModulePlan& plan, const std::string& module, double seconds);

// Plans the cache for `pid`'s executable from `recorder`'s profile and returns
// its summary. Only where nothing is injected (dynimize = false): an
// injection reports its own plan (Injection::plan), so the jit is not run
// twice on a loaded host. `options`: as an injection would plan.
Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder, const jit::JitOptions& options);

}  // namespace dyni
