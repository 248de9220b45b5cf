// Whether a held thread may run a function of the target.
#include "dynid/clean_thread.h"

#include <array>

#include <fmt/format.h>

#include "common/paths.h"
#include "dynid/module_choice.h"

#include <sys/ptrace.h>
#include <sys/syscall.h>

#include <algorithm>

#include "dynid/remote_syscall.h"
#include "dynid/syscall_stop.h"
#include "dynid/target_memory.h"

namespace dyni {
namespace {

// By the plain name (plain_symbol_name), or that name without its leading
// underscores (__posix_memalign, __malloc_trim). glibc's allocator inside
// (names libc6-dbg gives; Debian's libc has no .symtab) is listed too: a
// thread parked on an arena's lock inside reused_arena, under memalign's
// tail jump to _mid_memalign, has no public allocator name on its stack.
constexpr std::string_view kLockHolders[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc", "valloc",
    "pvalloc", "malloc_trim", "malloc_info", "malloc_stats", "mallinfo", "mallinfo2", "cfree", "fork", "_Fork",
    "__libc_fork", "dl_iterate_phdr", "_dl_find_object", "__frame_state_for", "_mid_memalign", "tcache_init",
    "malloc_consolidate", "sysmalloc", "systrim", "mtrim", "arena_get2", "arena_get_retry", "reused_arena",
    "get_free_list", "new_heap", "alloc_new_heap", "grow_heap", "shrink_heap", "heap_trim", "munmap_chunk",
    "mremap_chunk", "ptmalloc_init", "tcache_thread_shutdown", "malloc_hook_ini", "realloc_hook_ini",
    "memalign_hook_ini", "malloc_arena_thread_freeres", "libc_thread_freeres"};
// glibc's allocator is __libc_malloc, __libc_calloc, __libc_memalign, ...
// (the public names are weak aliases, and a symbolizer may show either) over
// _int_malloc and friends.
constexpr std::string_view kLockHolderPrefixes[] = {
    "_Unwind_",       "__register_frame", "__deregister_frame", "_dl_",          "__libc_malloc",
    "__libc_free",    "__libc_calloc",    "__libc_realloc",     "__libc_memalign", "__libc_valloc",
    "__libc_pvalloc", "__libc_mallopt",   "__libc_mallinfo",    "__libc_fork",     "_int_"};

// Why a thread at the exit of system call `nr`, which has returned, cannot
// run a function there, or "": an allocator makes these calls with its lock
// held (glibc's sysmalloc, grow_heap and systrim; jemalloc's and tcmalloc's
// page operations), where a frame that would name it may be missing (a tail
// call, a libc without .symtab, an allocator linked into the executable).
std::string why_no_function_after(long nr) {
  for (long memory : {SYS_mmap, SYS_munmap, SYS_mremap, SYS_madvise, SYS_mprotect, SYS_brk})
    if (nr == memory) return fmt::format("at the exit of system call {}, which an allocator makes under its lock", nr);
  return "";
}

}  // namespace

std::string_view plain_symbol_name(std::string_view name) {
  if (std::size_t at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
  // GCC's clones: .part.N, .constprop.N, .isra.N, .cold (no C or mangled name holds a dot).
  if (std::size_t dot = name.find('.'); dot != std::string_view::npos && dot > 0) name = name.substr(0, dot);
  if (name.starts_with("__GI_")) name.remove_prefix(5);  // glibc's internal aliases
  return name;
}

bool holds_call_locks(std::string_view name) {
  const std::string_view plain = plain_symbol_name(name);
  std::string_view bare = plain;
  while (bare.starts_with('_')) bare.remove_prefix(1);
  for (std::string_view n : kLockHolders)
    if (plain == n || bare == n) return true;
  for (std::string_view p : kLockHolderPrefixes)
    if (plain.starts_with(p)) return true;
  return false;
}

bool module_holds_call_locks(std::string_view path) {
  std::string_view base = paths::file_name(path);
  // Unwinders and allocators (glibc's malloc debugger, the sanitizers'
  // runtimes and Firefox's mozglue replace malloc too); a library that
  // defines malloc under any name is refused by module_choice.h as well.
  for (std::string_view m : {"libgcc_s.so", "ld-linux", "libunwind", "libjemalloc", "libtcmalloc", "libmimalloc",
                             "libtbbmalloc", "libhoard", "libsnmalloc", "libscudo", "libc_malloc_debug", "libmemusage",
                             "libasan", "libtsan", "libmsan", "libhwasan", "liblsan", "libmozglue"})
    if (base.starts_with(m)) return true;
  return false;
}

// Whether the thread may be inside an rseq critical section: its rseq area's
// rseq_cs is set (the kernel clears it lazily, so this may be a moment after
// one; another moment is found). Unknown (no PTRACE_GET_RSEQ_CONFIGURATION,
// kernels before 5.13) counts as inside.
bool maybe_in_rseq_section(pid_t tid) {
  struct {
    uint64_t rseq_abi_pointer;
    uint32_t rseq_abi_size, signature, flags, pad;
  } config{};
  constexpr long kGetRseqConfiguration = 0x420f;
  if (::ptrace(static_cast<__ptrace_request>(kGetRseqConfiguration), tid, sizeof config, &config) !=
      static_cast<long>(sizeof config))
    return true;
  if (config.rseq_abi_pointer == 0) return false;  // not registered
  auto rseq_cs = read_target(tid, config.rseq_abi_pointer + 8, 8);
  return !rseq_cs || std::any_of(rseq_cs->begin(), rseq_cs->end(), [](uint8_t b) { return b != 0; });
}

Status clean_for_calls(pid_t tid, const StoppedThread& thread, const ThreadStack& stack,
                       const profiler::Symbolizer& symbols, std::string_view executable, const CopiedFrom& copied_from,
                       std::string_view copied_module) {
  // A PC in a copy is looked up as the function it copies.
  auto locate = [&](uint64_t pc) {
    std::optional<uint64_t> original = copied_from ? copied_from(pc) : std::nullopt;
    return symbols.locate(original ? *original : pc);
  };
  // Parked in a system call the kernel restarts, at the exit of one that has
  // returned, or stopped in the executable's own code (a CPU-bound thread,
  // maybe the only one): the call then runs as a signal handler would at
  // that instruction. Only there, or in the copied library's code: another
  // library's code may hold a lock its callers' frames do not show (an
  // allocator's tail calls, an inlined lock); the copied one is never one
  // whose code holds the locks the call takes (module_choice.h).
  bool in_user_code = static_cast<long>(thread.regs.orig_rax) < 0;
  const profiler::Module* stopped_in = nullptr;  // the module whose code it is stopped in
  if (std::string why = why_no_call_in_syscall(tid, thread.regs); !why.empty()) return fail(why);
  if (!in_user_code && !in_restartable_call(thread.regs))
    if (std::string why = why_no_function_after(static_cast<long>(thread.regs.orig_rax)); !why.empty())
      return fail(why);
  if (in_user_code) {
    profiler::Location at = locate(thread.regs.rip);
    const std::string_view path =
        at.module < 0 ? std::string_view() : std::string_view(symbols.modules()[static_cast<std::size_t>(at.module)].path);
    // Never glibc's libc, copied or not: it defines malloc, which a thread
    // stopped anywhere in its code may be halfway through.
    const bool in_copied =
        !copied_module.empty() && path == copied_module && why_library_stays(path).empty() && !is_glibc_libc(path);
    if (executable.empty() || at.module < 0 || (path != executable && !in_copied))
      return fail("stopped in code outside the executable and the copied library");
    stopped_in = &symbols.modules()[static_cast<std::size_t>(at.module)];
    if (maybe_in_rseq_section(tid)) return fail("maybe inside an rseq critical section");
  }
  if (!stack.complete) return fail("stack not known to its end: " + stack.incomplete_why);
  for (std::size_t i = 0; i < stack.frames.size(); ++i) {
    const StackFrame& f = stack.frames[i];
    if (f.signal_frame) return fail("inside a signal handler");
    // A return address points past its call: look up the call itself.
    profiler::Location at = locate(i == 0 ? f.pc : f.pc - 1);
    if (at.module < 0) return fail(fmt::format("frame {:#x} is not in file-backed code", f.pc));
    const profiler::Module& m = symbols.modules()[static_cast<std::size_t>(at.module)];
    if (module_holds_call_locks(m.path)) return fail(fmt::format("a frame in {}", paths::file_name(m.path)));
    if (at.function && holds_call_locks(at.function->name)) return fail(fmt::format("a frame in {}", at.function->name));
  }
  // An executable with its own allocator (statically linked jemalloc):
  // stopped in its code, the thread may be halfway through a malloc that the
  // call's malloc would enter again. Only a parked thread will do. Last: it
  // reads the whole function table, once a window (the first clean thread
  // takes the call).
  if (stopped_in)
    if (std::string_view allocator = allocator_defined(*stopped_in); !allocator.empty())
      return fail(fmt::format("stopped in the code of {}, which defines {}", paths::file_name(stopped_in->path), allocator));
  return ok();
}

}  // namespace dyni
