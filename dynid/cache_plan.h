// The jit run for a profiled target (DESIGN.md §3, steps 4–6): the
// executable's hot set laid out into a code cache with its patch plan. Pure
// with respect to the target — it reads the executable's file and the
// profile, never the process's memory. Until injection lands, dynid only
// reports the plan (-profile=PID, log); nothing is written to the target.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "profiler/recorder.h"

namespace dyni {

// Plans the cache for `pid`'s executable from `recorder`'s profile and returns
// a summary: functions, bytes, sampled CPU accepted, rejections by reason.
Result<nlohmann::json> plan_code_cache(pid_t pid, const profiler::Recorder& recorder);

}  // namespace dyni
