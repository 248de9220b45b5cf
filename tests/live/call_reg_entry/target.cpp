// `call reg` in a hot function's first bytes. creg_dispatch begins with
// `call *%rdi`: a thread inside the callee has its return address at
// entry+2, inside the five bytes a patch would overwrite. One thread is
// parked there nearly all the time (its callee sleeps in nanosleep); two
// workers call creg_dispatch hot, with a callee that returns at once.
// usage: target ROUNDS
#include <cstdint>
#include <string>
#include <thread>

#include "tests/live/rounds.h"

extern "C" {
uint64_t creg_dispatch(uint64_t (*f)(uint64_t, uint64_t), uint64_t x);
uint64_t creg_step(uint64_t, uint64_t x);
uint64_t creg_block(uint64_t, uint64_t x);
}

// The callees take x in %rsi and need no stack alignment: creg_dispatch's
// call leaves the stack as it found it.
asm(R"(
  .text
  .globl creg_dispatch
  .type creg_dispatch, @function
creg_dispatch:
  .cfi_startproc
  call *%rdi
  imul $0x2545F491, %rax, %rax
  add $1, %rax
  ret
  .cfi_endproc
  .size creg_dispatch, .-creg_dispatch

  .globl creg_step
  .type creg_step, @function
creg_step:
  .cfi_startproc
  lea 1(%rsi,%rsi,2), %rax
  ret
  .cfi_endproc
  .size creg_step, .-creg_step

  .globl creg_block
  .type creg_block, @function
creg_block:
  .cfi_startproc
  mov %rsi, %r8
  lea creg_50ms(%rip), %rdi
  xor %esi, %esi
  mov $35, %eax
  syscall
  mov %r8, %rax
  ret
  .cfi_endproc
  .size creg_block, .-creg_block

  .section .rodata
  .balign 8
creg_50ms:
  .quad 0, 50000000
  .text
)");

[[gnu::noinline]] static uint64_t creg_work(uint64_t x) {
  for (int i = 0; i < 16000000; ++i) x = creg_dispatch(creg_step, x ^ static_cast<uint64_t>(i));
  return x;
}

int main(int argc, char** argv) {
  std::thread([] {
    uint64_t x = 1;
    for (;;) x = creg_dispatch(creg_block, x);
  }).detach();
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [] {
    uint64_t a = 0;
    std::thread other([&] { a = creg_work(1); });
    uint64_t b = creg_work(2);
    other.join();
    return std::to_string(a) + " " + std::to_string(b);
  });
}
