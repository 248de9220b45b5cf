// Where below a held thread's stack pointer dynid may write a frame.
#include "dynid/thread_stack.h"

#include <fmt/format.h>

#include "dynid/target_memory.h"

namespace dyni {
namespace {

// The thread's own stack: [stack] for the main thread, else the mapping
// glibc made for the thread, whose descriptor (at fs_base) sits at its top
// with the stack growing down below it. rsp below fs_base also rules out an
// alternate stack mapped right above the thread's stack (the kernel may
// merge the two mappings into one).
bool is_own_stack(const profiler::Mapping& m, pid_t pid, pid_t tid, uint64_t rsp, uint64_t fs_base) {
  if (m.shared || !m.readable || !m.writable || m.file_backed()) return false;
  if (m.path == "[stack]") return tid == pid;
  return m.path.empty() && m.start <= fs_base && fs_base < m.end && rsp <= fs_base;
}

bool holds_another_thread(const profiler::Mapping& m, uint64_t fs_base, const std::vector<uint64_t>& thread_pointers) {
  for (uint64_t tp : thread_pointers)
    if (tp != fs_base && m.start <= tp && tp < m.end) return true;
  return false;
}

}  // namespace

Result<FramePlace> place_frame_below(const std::vector<profiler::Mapping>& maps, pid_t pid, pid_t tid, uint64_t rsp,
                                     uint64_t fs_base, uint64_t frame_bytes,
                                     const std::vector<uint64_t>& thread_pointers) {
  if (rsp < kRedZone + frame_bytes + 64) return fail(fmt::format("thread {}: stack pointer {:#x} too low", tid, rsp));
  const profiler::Mapping* stack = mapping_at(maps, rsp - 1);
  if (!stack || !is_own_stack(*stack, pid, tid, rsp, fs_base))
    return fail(fmt::format("thread {}: stack pointer {:#x} is not on the thread's own stack "
                            "(alternate signal stack, heap or foreign stack)",
                            tid, rsp));
  if (holds_another_thread(*stack, fs_base, thread_pointers))
    return fail(fmt::format("thread {}: its stack mapping {:#x}-{:#x} also holds another thread's descriptor", tid,
                            stack->start, stack->end));
  uint64_t frame_addr = (rsp - kRedZone - frame_bytes) & ~uint64_t{63};
  if (frame_addr < stack->start)
    return fail(fmt::format("thread {}: {} bytes below its stack pointer {:#x} leave its stack {:#x}-{:#x}", tid,
                            rsp - frame_addr, rsp, stack->start, stack->end));
  return FramePlace{frame_addr, *stack};
}

}  // namespace dyni
