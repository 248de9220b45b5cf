// Checks made inside a stop window that the process is still the one dyni
// prepared for and, once there is a cache, that it still holds it; and the
// dyni frames every stack proof of the target needs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "dynid/injector.h"
#include "dynid/proc_reader.h"
#include "dynid/thread_unwind.h"

namespace dyni::inject {

// Every dyni cache's frames a stack of the target may pass through.
std::vector<UnwindTable> frame_tables(const Injection& in);

// Called with every thread held, before anything is written: the process is
// the one dyni prepared for (its start time: not a reused pid) and, once
// there is a cache, still holds it (an exec drops every mapping): `mark`,
// bytes dyni wrote, are still at `at`.
Status same_target(pid_t pid, uint64_t start_time, uint64_t at = 0, std::span<const uint8_t> mark = {});

// The process still runs the image the caller profiled: an exec keeps pid
// and start time, and changes where its code and stack are (`image`).
Status same_image(const ProcStat& stat, uint64_t image);

// The same as same_target, once the cache's record is written (its magic marks it).
Status same_target_with_record(const Injection& in);

}  // namespace dyni::inject
