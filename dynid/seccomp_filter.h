// Whether a target's seccomp filters let dyni's injected system calls through
// (issue 21 item 4; DESIGN.md §7).
//
// A filter (systemd's SystemCallFilter=, MemoryDenyWriteExecute= in its
// seccomp form, a sandboxing library) may answer a call dyni injects with a
// signal, a kill or an errno. Instead of refusing every such target, dynid
// reads each thread's filters (PTRACE_SECCOMP_GET_FILTER: the classic BPF
// programs as the thread installed them) and runs them, as the kernel would,
// on the exact calls it is about to inject. It goes ahead only when every
// filter answers ALLOW (or LOG, which allows); anything else refuses, with the
// call and the answer named, before anything is written.
//
// A program the kernel accepted is still the target's input (I9): the
// interpreter checks every instruction against seccomp's own rules (an opcode
// it does not know, a jump out of the program, a load outside seccomp_data)
// and refuses what it cannot run, rather than guess. It is fuzzed.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

// One system call as a filter sees it (struct seccomp_data, x86-64 only).
struct SeccompCall {
  long nr = 0;
  std::array<uint64_t, 6> args{};
  uint64_t ip = 0;  // the address after the `syscall` instruction
};

// The program's answer (SECCOMP_RET_*), or an error when the program is not
// one seccomp would have accepted. Pure; unit-tested and fuzzed.
Result<uint32_t> run_seccomp_program(std::span<const sock_filter> program, const SeccompCall& call);

// The answer of all of a thread's filters together (oldest first, as
// read_seccomp_filters gives them): the most severe wins, as in the kernel
// (SECCOMP_RET_KILL_PROCESS first, SECCOMP_RET_ALLOW last; between equals,
// the newest filter's).
Result<uint32_t> seccomp_answer(const std::vector<std::vector<sock_filter>>& filters, const SeccompCall& call);

// ALLOW and LOG run the call; everything else does not.
bool seccomp_allows(uint32_t answer);

// "KILL_PROCESS", "ERRNO 1 (Operation not permitted)", "ALLOW", ...
std::string describe_seccomp_answer(uint32_t answer);

// "mmap(0x7f0000000000, 0x200000, 0x5, 0x100022, 0xffffffffffffffff, 0)"
std::string describe_call(const SeccompCall& call);

// Whether a filter may hand a call to a supervisor process
// (SECCOMP_RET_USER_NOTIF, or a return of the accumulator, which could be).
// Such a target is left alone: a thread stopped while its supervisor handles
// its call has the call withdrawn and made again (or, waiting killably, does
// not stop at all), which a supervisor may not expect from a stop it did not
// cause. Pure.
bool may_notify_supervisor(std::span<const sock_filter> program);

// The filters of a ptrace-stopped thread, oldest first (the kernel's index 0).
// Needs CAP_SYS_ADMIN and a dynid not itself under seccomp.
Result<std::vector<std::vector<sock_filter>>> read_seccomp_filters(pid_t tid);

// A thread's seccomp mode from its /proc status text: '0' (none, or no such
// field), '1' (strict), '2' (filters), '3' (dead).
char seccomp_mode(const std::string& status);

// Whether `tid` (of `pid`, ptrace-stopped) may run every one of `calls`, and
// none of its filters may notify a supervisor: ok, or why not
// ("thread 12 runs under strict seccomp", "the seccomp filter of thread 12
// answers madvise(...) with ERRNO 1 (Operation not permitted)"). A thread without seccomp is ok
// without reading anything but its status.
Status seccomp_lets_through(pid_t pid, pid_t tid, std::span<const SeccompCall> calls);

}  // namespace dyni
