// Where below a held thread's stack pointer dynid may write a frame
// (remote_syscall's rt_sigframe), so that the write lands in memory only that
// thread's unused stack holds (DESIGN.md §7: /proc/PID/mem ignores protections
// and writes straight through guard pages).
//
// The rule: the frame, from its 64-byte aligned start up to the stack pointer
// (red zone included), lies in the one mapping that holds the stack pointer,
// and that mapping is the thread's own stack:
//  - private, anonymous, readable and writable (never [heap], a file or a
//    shared mapping);
//  - "[stack]" for the main thread, or, for a thread glibc created, the
//    mapping that also holds the thread's descriptor (glibc puts struct
//    pthread and the TLS at the top of the stack it maps, and fs_base points
//    there).
// A guard page is a mapping of its own (PROT_NONE), so "inside the mapping"
// means above it. A mapping that also holds another thread's descriptor
// (threads made with guard size 0 and merged, or stacks carved from one
// pool) is refused: the frame could reach that thread's TLS. A thread running on an alternate signal stack, a coroutine
// stack carved from the heap, or a stack too full for the frame is refused
// with the reason; the caller picks another thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "profiler/process_maps.h"

namespace dyni {

constexpr uint64_t kRedZone = 128;  // the x86-64 ABI's red zone below rsp

struct FramePlace {
  uint64_t addr = 0;           // 64-byte aligned, below the red zone
  profiler::Mapping stack;     // the thread's stack: the write's bounds
};

// Where a `frame_bytes` frame goes below `rsp`'s red zone, once the rule
// above holds for thread `tid` of `pid`.
// `thread_pointers`: fs_base of every thread of the process (this one's may
// be among them).
Result<FramePlace> place_frame_below(const std::vector<profiler::Mapping>& maps, pid_t pid, pid_t tid, uint64_t rsp,
                                     uint64_t fs_base, uint64_t frame_bytes,
                                     const std::vector<uint64_t>& thread_pointers);

}  // namespace dyni
