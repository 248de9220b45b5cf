// Real compiled functions for jit tests: their CFGs are checked in jit_test.cpp.
// Built with -O2 so the switch becomes a jump table.
#include <csetjmp>
#include <cstdarg>

extern "C" {

// Distinct work per case, so the compiler needs a jump table (a switch that
// only returns constants becomes a lookup table instead).
__attribute__((noinline)) int jit_switch(int x, int y) {
  switch (x) {
    case 0: return y * 11;
    case 1: return y + 23;
    case 2: return y ^ 37;
    case 3: return y / 3 + 41;
    case 4: return y << 5;
    case 5: return y % 7 - 61;
    case 6: return ~y;
    case 7: return y * y;
    default: return -1;
  }
}

__attribute__((noinline)) long jit_loop(const int* v, int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i) sum += v[i] * (i & 3 ? 1 : 2);
  return sum;
}

}

// More shapes for the in-process tests (relocated copies must compute the same).
extern "C" {

__attribute__((noinline)) long jit_fib(int n) { return n < 2 ? n : jit_fib(n - 1) + jit_fib(n - 2); }

__attribute__((noinline)) long jit_varargs(int n, ...) {
  va_list ap;
  va_start(ap, n);
  long sum = 0;
  for (int i = 0; i < n; ++i) sum = sum * 31 + va_arg(ap, int);
  va_end(ap);
  return sum;
}

static jmp_buf jit_jmp;
__attribute__((noinline)) void jit_bail(int code) { longjmp(jit_jmp, code); }

// Returns through longjmp for negative inputs: setjmp's saved return address
// is in the copy, and longjmp must land there.
__attribute__((noinline)) int jit_setjmp(int x) {
  volatile int steps = 0;
  int code = setjmp(jit_jmp);
  if (code != 0) return -code * 1000 - steps;
  for (int i = 0; i < 10; ++i) {
    steps = steps + 1;
    if (x < 0 && i == -x % 10) jit_bail(-x);
  }
  return x * 2 + steps;
}

__attribute__((noinline)) long jit_tail_b(long x) { return x * 7 + 3; }
// At -O2 the call becomes a jmp (a tail call) to jit_tail_b.
__attribute__((noinline)) long jit_tail_a(long x) {
  if (x & 1) return jit_tail_b(x + 1);
  return jit_tail_b(x - 1);
}

// A bytecode loop over a switch: the table's base is loaded once, outside
// the loop (compilers hoist it into a callee-saved register when the loop
// calls out), the bound is a compare on every way round.
// (Called through a pointer: a callee the compiler cannot see into, so the
// caller-saved registers are the callee's, as the jit's dataflow assumes.)
long (*volatile jit_fib_pointer)(int) = jit_fib;

__attribute__((noinline)) long jit_switch_loop(const unsigned char* ops, int n) {
  long acc = 3;
  for (int i = 0; i < n; ++i) {
    switch (ops[i] % 9) {
      case 0: acc += 7; break;
      case 1: acc *= 3; break;
      case 2: acc -= ops[i]; break;
      case 3: acc ^= 0x55; break;
      case 4: acc = jit_fib_pointer(static_cast<int>(acc & 7)) + acc; break;
      case 5: acc <<= 1; break;
      case 6: acc = -acc; break;
      case 7: acc += i; break;
      default: acc /= 2; break;
    }
  }
  return acc;
}

// Computed goto: label addresses in a table (a PIE's: relocated at load).
__attribute__((noinline)) int jit_computed_goto(const unsigned char* ops, int n) {
  static const void* labels[] = {&&inc, &&dbl, &&neg, &&end};
  int acc = 1, i = 0;
#define NEXT goto *labels[i < n ? ops[i++] & 3 : 3]
  NEXT;
inc:
  acc += 1;
  NEXT;
dbl:
  acc *= 2;
  NEXT;
neg:
  acc = -acc;
  NEXT;
end:
  return acc;
#undef NEXT
}

}

// A function that reads its return address, and a caller that compares it
// with its own address: a copy of the caller would see a cache address.
extern "C" {

__attribute__((noinline)) void* jit_return_address(void) { return __builtin_return_address(0); }

__attribute__((noinline)) long jit_calls_return_address(long x) {
  char* ra = static_cast<char*>(jit_return_address());
  return ra - reinterpret_cast<char*>(&jit_calls_return_address) + x;
}

}

// jit_entry_jumper jumps 5 bytes into jit_entry_jumped, as mempcpy into
// memcpy: jit_entry_jumped's entry patch (after its kept first instruction,
// 3 bytes in) would be run from its middle.
asm(R"(
        .intel_syntax noprefix
        .text
        .globl jit_entry_jumper
        .type jit_entry_jumper, @function
jit_entry_jumper:
        lea rdi, [rdi + rsi]
        jmp .Ljit_entry_jumped_inner
        .size jit_entry_jumper, . - jit_entry_jumper
        .globl jit_entry_jumped
        .type jit_entry_jumped, @function
jit_entry_jumped:
        mov rax, rdi
        nop
        nop
.Ljit_entry_jumped_inner:
        lea rax, [rdi + 5]
        ret
        .size jit_entry_jumped, . - jit_entry_jumped
        .att_syntax prefix
)");
