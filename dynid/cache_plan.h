// The jit run for a profiled target (DESIGN.md §3, steps 4–6): the
// executable's hot set laid out into a code cache with its patch plan. Pure
// with respect to the target — it reads the executable's file and the
// profile, never the process's memory. The plan is reported (-profile=PID,
// log); injection (injector.h) makes its own at the cache's real address.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "jit/module_profile.h"
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

// Plans the cache for `pid`'s executable from `recorder`'s profile and returns
// a summary: functions, bytes, sampled CPU accepted, rejections by reason.
Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder);

}  // namespace dyni
