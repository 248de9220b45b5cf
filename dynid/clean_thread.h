// Whether a held thread may run a function of the target (remote_call.h)
// without deadlocking on a lock it holds itself or corrupting state it was
// in the middle of changing (DESIGN.md §7 "Calling code in the target").
//
// The thread must be parked in a blocking system call that the kernel will
// restart, on its way out of one that has returned (not nanosleep's restart
// through restart_block, not fork, clone or exec), or stopped in the
// executable's own code outside any rseq critical section (a CPU-bound
// program's only thread: the call then runs as a signal handler would
// there); never in a system call that waits with a temporary signal mask
// (sigsuspend; ppoll, pselect6, epoll_pwait given one) or is not made by
// `syscall`; with a stack unwound to its
// end, no signal handler on it, every frame in a file's code, and no frame in
// code that holds the locks such a call may take:
// malloc and its family (any allocator's, by name), the unwinder's frame
// registry (_Unwind_*, __register_frame*, __deregister_frame*, all of
// libgcc_s), the dynamic linker (all of ld.so: dl_iterate_phdr's lock), and
// fork (which holds every malloc arena lock). A thread blocked on a mutex
// inside malloc has malloc on its stack, so it is refused like one that
// holds the lock.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "dynid/thread_unwind.h"
#include "dynid/world_stop.h"
#include "profiler/symbolizer.h"

namespace dyni {

// A function (mangled or C name) that may hold a lock a remote call needs,
// by its plain name: libc6-dbg's names carry versions (cfree@GLIBC_2.2.5),
// glibc's internal aliases (__GI___dl_iterate_phdr) and GCC's clone
// suffixes (_mid_memalign.constprop.0).
bool holds_call_locks(std::string_view function_name);
// `name` without a symbol version (@...), a GCC clone suffix (.part.N,
// .constprop.N, .isra.N, .cold) or glibc's __GI_ prefix.
std::string_view plain_symbol_name(std::string_view name);
// A module all of whose code may (libgcc_s, ld.so, libunwind).
bool module_holds_call_locks(std::string_view path);

// Where dyni's copies of the executable's functions are: the original
// function's run-time entry for a PC in a copy, or none for a PC elsewhere.
using CopiedFrom = std::function<std::optional<uint64_t>(uint64_t pc)>;

// `executable`: the path of the target's executable as the symbolizer names
// it (a thread stopped in user code must be there); empty: parked only.
// `copied_from`: a PC in one of dyni's copies counts as a PC in the function
// it copies (a thread running a counting copy is in the executable's code).
// `copied_module`: a library whose functions dyni copies (chosen because no
// lock a remote call takes is held in its code: module_choice.h
// why_library_stays); a thread stopped in its code is as clean as one in
// the executable's (a C++ program whose only thread runs a hot plugin).
Status clean_for_calls(pid_t tid, const StoppedThread& thread, const ThreadStack& stack,
                       const profiler::Symbolizer& symbols, std::string_view executable,
                       const CopiedFrom& copied_from = {}, std::string_view copied_module = {});

}  // namespace dyni
