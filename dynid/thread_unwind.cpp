// A held thread's call stack through libunwind-ptrace.
#include "dynid/thread_unwind.h"

#include <libunwind-ptrace.h>

#include <fmt/format.h>

namespace dyni {

struct StackReader::Space {
  unw_addr_space_t as = nullptr;
};

StackReader::StackReader(pid_t) : space_(std::make_unique<Space>()) {
  space_->as = unw_create_addr_space(&_UPT_accessors, 0);
  if (space_->as) unw_set_caching_policy(space_->as, UNW_CACHE_GLOBAL);
}

StackReader::~StackReader() {
  if (space_->as) unw_destroy_addr_space(space_->as);
}

Result<ThreadStack> StackReader::unwind(pid_t tid, std::size_t max_frames) const {
  if (!space_->as) return fail("libunwind: no address space");
  void* upt = _UPT_create(tid);
  if (!upt) return fail(fmt::format("libunwind: cannot read thread {}", tid));
  ThreadStack stack;
  unw_cursor_t cursor;
  int r = unw_init_remote(&cursor, space_->as, upt);
  if (r < 0) stack.incomplete_why = fmt::format("unw_init_remote: {}", unw_strerror(r));
  uint64_t guessed = 0;  // a frame stepped from without unwind information
  while (r >= 0 && stack.frames.size() < max_frames) {
    unw_word_t ip = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    bool signal = unw_is_signal_frame(&cursor) > 0;
    stack.frames.push_back({static_cast<uint64_t>(ip), signal});
    // Without CFI, libunwind guesses the caller from the frame pointer, and
    // may end the stack there (unw_step returns 0) where it does not end.
    // (For a PC without DWARF info, x86-64 libunwind's unw_get_proc_info
    // still succeeds, with a made-up range of one byte.)
    unw_proc_info_t info{};
    if (!guessed && !signal && (unw_get_proc_info(&cursor, &info) < 0 || info.end_ip <= info.start_ip + 1)) guessed = ip;
    r = unw_step(&cursor);
    if (r == 0) stack.complete = guessed == 0;
    if (r <= 0) break;
  }
  if (r == 0 && guessed)
    stack.incomplete_why = fmt::format("no unwind information at {:#x}: the rest of the stack is a guess", guessed);
  if (r < 0 && stack.incomplete_why.empty())
    stack.incomplete_why = fmt::format("no unwind information past {:#x} ({})",
                                       stack.frames.empty() ? 0 : stack.frames.back().pc, unw_strerror(r));
  if (r > 0) stack.incomplete_why = fmt::format("more than {} frames", max_frames);
  _UPT_destroy(upt);
  return stack;
}

}  // namespace dyni
