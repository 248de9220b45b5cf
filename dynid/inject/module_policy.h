// What stays in the original code of the module dyni copies, whatever its
// heat (issue 22 item 3), and the jit's input for that module with every
// such rule applied. In glibc's libc:
//  - every function that makes a system call (jit keep_system_call_functions):
//    the `syscall; ret` and rt_sigreturn sequences dyni's remote system
//    calls run (remote_syscall.h), __restore_rt (gdb and the unwinders know
//    it by its bytes), clone and clone3 (the stack reader matches their
//    ends: thread_unwind.h), and the cancellable system calls, where a
//    cancelled thread's unwinding begins;
//  - the functions clean_for_calls knows by name (holds_call_locks: malloc
//    and its family, fork, the unwinder's and ld.so's entries), so that a
//    thread in them is always seen there and __register_frame never waits
//    on a lock its own thread holds;
//  - thread cancellation's own functions, and makecontext's trampoline
//    (the bottom frame of a context's stack).
// Its entries are patched as the executable's are ([options]
// probe_safe_entries: memmove and memcmp have no spot where a uprobe at any
// instruction leaves the jump whole, so with it they stay unpatched; a
// uprobe at offset 0, as bcc's tools attach, is safe either way). With no
// unwinder loaded, only its leaf functions are copied (fit_to_unwinder).
// ld.so, the vDSO and libgcc_s are never copied at all (module_choice.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/inject/target_module.h"
#include "elf/function_table.h"
#include "jit/module_profile.h"
#include "jit/pipeline.h"

namespace dyni::inject {

// The functions of glibc's libc `file` that stay in place by name: start →
// why. Every name of a function counts, the file's and its libc6-dbg
// debug file's (they name one address differently: free is cfree in one,
// cfree@GLIBC_2.2.5 in the other), each plain (clean_thread.h
// plain_symbol_name). Fails for a glibc other than those these rules were
// made for (2.34 to 2.36; 2.41 moved cancellation into __syscall_cancel),
// or when malloc, free, calloc, realloc or pthread_testcancel is not found
// by name: then dyni does not know that libc.
Result<std::map<uint64_t, std::string>> libc_functions_kept_in_place(const elf::ElfFile& file,
                                                                     const elf::FunctionTable& functions);
// The newest GLIBC_2.N version `file` names (its .dynstr), as N; 0: none.
int glibc_minor_version(const elf::ElfFile& file);
// The function symbols of `file` and of its detached debug file where one
// is installed (elf::debug_file_path).
std::vector<elf::Symbol> function_symbols_with_debug(const elf::ElfFile& file);

// The jit's input for `module`'s hot functions `hot`, with its cache at
// `cache_base` (link-time numbering): its unwind rows, USDT probe sites,
// caller lookups, and what stays in place. Fails when its probe notes are
// malformed (jit::use_probe_sites).
Result<jit::ModuleInput> jit_input(const TargetModule& module, const jit::ModuleProfile* profile,
                                   std::vector<uint64_t> hot, uint64_t cache_base);

// With no unwinder loaded in the process (`register_frame` 0: a C program),
// the copies' frames cannot be registered. Nothing can throw through them
// then; glibc loads libgcc_s later only for backtrace() and thread
// cancellation, which stop at a copy's frame (a shorter backtrace;
// cancellation still runs the thread's cleanup buffers, but skips the
// landing pads above that frame). So a module with exception tables is
// refused, but glibc's libc (its cleanups under cancellation), whose leaf
// functions alone are copied (TargetModule::only_leaves): never below
// another frame at a cancellation point.
Status fit_to_unwinder(TargetModule& module, uint64_t register_frame);

}  // namespace dyni::inject
