// Stop-window checks of the target's identity (target_checks.h).
#include "dynid/inject/target_checks.h"

#include <algorithm>

#include <fmt/format.h>

#include "dynid/cache_record.h"
#include "dynid/target_memory.h"

namespace dyni::inject {

std::vector<UnwindTable> frame_tables(const Injection& in) {
  std::vector<UnwindTable> out = in.other_frames;
  if (in.frames.entries) out.push_back(in.frames);
  return out;
}

Status same_target(pid_t pid, uint64_t start_time, uint64_t at, std::span<const uint8_t> mark) {
  auto stat = read_proc_stat("/proc", pid);
  if (!stat || stat->start_time != start_time) return fail(fmt::format("process {} is gone or was replaced", pid));
  if (mark.empty()) return ok();
  auto head = read_target(pid, at, mark.size());
  if (!head || !std::equal(mark.begin(), mark.end(), head->begin()))
    return fail(fmt::format("the cache at {:#x} is gone from process {} (exec?)", at, pid));
  return ok();
}

Status same_image(const ProcStat& stat, uint64_t image) {
  if (image && stat.image && stat.image != image)
    return fail(fmt::format("process {} exec'd since it was profiled", stat.pid));
  return ok();
}

Status same_target_with_record(const Injection& in) {
  return same_target(in.pid, in.start_time, in.cache.addr, kRecordMagic);
}

}  // namespace dyni::inject
