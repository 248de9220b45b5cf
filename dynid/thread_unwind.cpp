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
  while (r >= 0 && stack.frames.size() < max_frames) {
    unw_word_t ip = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    stack.frames.push_back({static_cast<uint64_t>(ip), unw_is_signal_frame(&cursor) > 0});
    r = unw_step(&cursor);
    if (r == 0) stack.complete = true;
    if (r <= 0) break;
  }
  if (r < 0 && stack.incomplete_why.empty())
    stack.incomplete_why = fmt::format("no unwind information past {:#x} ({})",
                                       stack.frames.empty() ? 0 : stack.frames.back().pc, unw_strerror(r));
  if (r > 0) stack.incomplete_why = fmt::format("more than {} frames", max_frames);
  _UPT_destroy(upt);
  return stack;
}

}  // namespace dyni
