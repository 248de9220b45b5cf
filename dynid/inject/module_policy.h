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

// The functions of glibc's libc that stay in place by name: start → why.
std::map<uint64_t, std::string> libc_functions_kept_in_place(const elf::FunctionTable& functions);

// The jit's input for `module`'s hot functions `hot`, with its cache at
// `cache_base` (link-time numbering): its unwind rows, USDT probe sites,
// caller lookups, and what stays in place. Fails when its probe notes are
// malformed (jit::use_probe_sites).
Result<jit::ModuleInput> jit_input(const TargetModule& module, const jit::ModuleProfile* profile,
                                   std::vector<uint64_t> hot, uint64_t cache_base);

}  // namespace dyni::inject
