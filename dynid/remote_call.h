// A function of the target run in one of its threads: how dynid makes the
// target's own unwinder learn the cache's frames (__register_frame, I7).
//
// The thread is one that holds no lock the function may need: the caller
// picks it with clean_for_calls() (clean_thread.h). The function may take
// locks other threads hold (the unwinder's mutex, malloc's arenas), so it
// runs with every other thread released: none is stopped while it runs.
//
// The chain is remote_syscall's, made safe against dynid dying at any
// instant the same way:
//  1. below the thread's red zone, its whole state in an rt_sigframe whose
//     return address is dyni's return stub (kReturnStub, in memory dyni
//     owns: `mov rdi, rax; mov eax, 15; syscall`, i.e. rt_sigreturn);
//  2. rip at the function, rsp at the frame (= 8 mod 16, as after a call),
//     arguments in rdi..r9, every blockable signal blocked;
//  3. the others released; the thread runs under PTRACE_SYSCALL until the
//     stub's rt_sigreturn enters (rdi holds the result), then through it: the
//     kernel restores the thread from the frame, and dynid puts its registers
//     back exactly as at its stop (the interrupted call restarts at detach).
// Should dynid die, the thread finishes the function, returns into the stub
// and restores itself; syscall tracing ends with the tracer. Should the
// function not return in time, the thread is detached and does the same by
// itself later; the result is then unknown.
#pragma once

#include <sys/syscall.h>

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>

#include "common/result.h"
#include "dynid/remote_syscall.h"
#include "dynid/seccomp_filter.h"
#include "dynid/world_stop.h"

namespace dyni {

// mov rdi, rax; mov eax, 15 (rt_sigreturn); syscall
constexpr std::array<uint8_t, 10> kReturnStub = {0x48, 0x89, 0xc7, 0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
// The stub's rt_sigreturn as a thread's seccomp filters see it.
inline SeccompCall stub_sigreturn(uint64_t return_stub) {
  return SeccompCall{SYS_rt_sigreturn, {}, return_stub + kReturnStub.size()};
}

struct RemoteCall {
  uint64_t function = 0;
  std::array<uint64_t, 6> args{};
  uint64_t return_stub = 0;  // where kReturnStub lies, in r-x memory dyni owns
};

// Runs `call` in held thread `tid` and returns what it returned (rax). On
// return the other threads have been released and `tid` is still held, as it
// was at its stop. A timeout detaches `tid` too, and is an error.
Result<uint64_t> remote_call(WorldStop& world, pid_t tid, const RemoteCall& call, std::chrono::milliseconds timeout);

}  // namespace dyni
