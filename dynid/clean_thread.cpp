// Whether a held thread may run a function of the target.
#include "dynid/clean_thread.h"

#include <array>

#include <fmt/format.h>

#include "dynid/remote_syscall.h"

namespace dyni {
namespace {

constexpr std::array<std::string_view, 22> kLockHolders = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc", "valloc",
    "pvalloc", "malloc_trim", "malloc_info", "malloc_stats", "mallinfo", "mallinfo2", "cfree", "fork", "_Fork",
    "__libc_fork", "dl_iterate_phdr", "_dl_find_object", "__frame_state_for"};
constexpr std::array<std::string_view, 6> kLockHolderPrefixes = {"_Unwind_",          "__register_frame",
                                                                 "__deregister_frame", "__libc_malloc",
                                                                 "__libc_free",       "_dl_"};

std::string_view basename(std::string_view path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

bool holds_call_locks(std::string_view name) {
  for (std::string_view n : kLockHolders)
    if (name == n) return true;
  for (std::string_view p : kLockHolderPrefixes)
    if (name.starts_with(p)) return true;
  return false;
}

bool module_holds_call_locks(std::string_view path) {
  std::string_view base = basename(path);
  return base.starts_with("libgcc_s.so") || base.starts_with("ld-linux") || base.starts_with("libunwind");
}

Status clean_for_calls(const StoppedThread& thread, const ThreadStack& stack, const profiler::Symbolizer& symbols) {
  // Parked in a system call the kernel restarts, or stopped in user code
  // (a CPU-bound thread, maybe the only one): the call then runs as a signal
  // handler would at that instruction, so what matters is the stack below.
  bool in_user_code = static_cast<long>(thread.regs.orig_rax) < 0;
  if (!in_user_code && !in_restartable_call(thread.regs))
    return fail("in a system call that is not restarted");
  if (!stack.complete) return fail("stack not known to its end: " + stack.incomplete_why);
  for (std::size_t i = 0; i < stack.frames.size(); ++i) {
    const StackFrame& f = stack.frames[i];
    if (f.signal_frame) return fail("inside a signal handler");
    // A return address points past its call: look up the call itself.
    profiler::Location at = symbols.locate(i == 0 ? f.pc : f.pc - 1);
    if (at.module < 0) return fail(fmt::format("frame {:#x} is not in file-backed code", f.pc));
    const profiler::Module& m = symbols.modules()[static_cast<std::size_t>(at.module)];
    if (module_holds_call_locks(m.path)) return fail(fmt::format("a frame in {}", basename(m.path)));
    if (at.function && holds_call_locks(at.function->name)) return fail(fmt::format("a frame in {}", at.function->name));
  }
  return ok();
}

}  // namespace dyni
