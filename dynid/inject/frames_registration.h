// Step 4 of an injection: the cache's .eh_frame is registered with the
// target's own unwinder (libgcc_s's __register_frame) by a function call in
// a thread parked at a clean point (remote_call.h, clean_thread.h, I7). A
// target whose unwinder is not libgcc_s is refused; a C program with no
// unwinder loaded needs none.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "dynid/injector.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {

// The run-time address of __register_frame in the libgcc that serves the
// target's throws; 0 when the process has no unwinder loaded; fails when
// its unwinder is one dyni cannot give the frames to.
Result<uint64_t> register_frame_function(pid_t pid, const std::vector<profiler::Mapping>& maps,
                                         const profiler::Symbolizer& symbols);

struct RegisterCall {
  uint64_t function = 0;  // __register_frame, run-time
  uint64_t stub = 0;      // the cache's return stub (kReturnStub), where the call returns
  std::chrono::milliseconds timeout{2000};
  bool single_threaded = false;  // InjectRequest::single_threaded
};

// Registers `in`'s .eh_frame (in.eh_frame_addr) through a remote call. A
// window may find no thread parked where it can run a call (every thread
// busy, or in malloc): a few more are tried, 100 ms apart.
Status register_cache_frames(const Injection& in, const profiler::Symbolizer& symbols, std::string_view executable,
                             const RegisterCall& call);

}  // namespace dyni::inject
