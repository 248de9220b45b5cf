/* The C corpus of the differential execution test: small functions of many
 * shapes, each `long d_NAME(long a, long b)` and defined for every input (no
 * division by zero, bounded loops and recursion). Built by gcc and clang at
 * several levels; see diff_exec.cpp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((noinline, used, visibility("default")))
#define HELPER static __attribute__((noinline))

/* --- switches ----------------------------------------------------------- */

EXPORT long d_switch_dense(long a, long b) {
  switch (a & 15) {
    case 0: return b * 11;
    case 1: return b + 23;
    case 2: return b ^ 37;
    case 3: return b / 3 + 41;
    case 4: return b << 5;
    case 5: return b % 7 - 61;
    case 6: return ~b;
    case 7: return b * b;
    case 8: return b - 1000;
    case 9: return (b >> 3) | 1;
    case 10: return b & 0xff00;
    default: return -1;
  }
}

EXPORT long d_switch_sparse(long a, long b) {
  switch (a) {
    case -1000: return b + 1;
    case -7: return b * 3;
    case 3: return b - 9;
    case 100: return b ^ 0x5555;
    case 1000: return b << 2;
    case 4096: return -b;
    case 99999: return b / 5;
    default: return a + b;
  }
}

EXPORT long d_switch_fallthrough(long a, long b) {
  long r = 0;
  switch (a & 7) {
    case 0: r += b;
    /* fall through */
    case 1: r ^= 0x11;
    /* fall through */
    case 2: r *= 3; break;
    case 3: r = b - 5;
    /* fall through */
    case 4: r += 77;
    /* fall through */
    case 5: r -= a; break;
    default: r = -b;
  }
  return r;
}

EXPORT long d_switch_in_loop(long a, long b) {
  long r = b;
  for (long i = 0; i < (a & 31); ++i) {
    switch ((r + i) & 7) {
      case 0: r += 3; break;
      case 1: r ^= i; break;
      case 2: r -= 11; break;
      case 3: r = r * 5 + 1; break;
      case 4: continue;
      case 5: r >>= 1; break;
      case 6: r += i * i; break;
      default: r = ~r;
    }
    r &= 0xffffff;
  }
  return r;
}

EXPORT long d_switch_char(long a, long b) {
  char c = (char)a;
  switch (c) {
    case 'a': case 'e': case 'i': case 'o': case 'u': return 1 + b;
    case '0' ... '9': return c - '0' + b;
    case ' ': case '\t': case '\n': return 100;
    case 'A' ... 'Z': return c + 32;
    default: return -c;
  }
}

/* --- recursion and calls ---------------------------------------------- */

HELPER long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
EXPORT long d_fib(long a, long b) { return fib(a & 15) + b; }

HELPER long ack(long m, long n) {
  if (m == 0) return n + 1;
  if (n == 0) return ack(m - 1, 1);
  return ack(m - 1, ack(m, n - 1));
}
EXPORT long d_ackermann(long a, long b) { return ack(a & 1, b & 7) + ack(2, a & 3); }

HELPER long is_odd(long n);
HELPER long is_even(long n) { return n == 0 ? 1 : is_odd(n - 1); }
HELPER long is_odd(long n) { return n == 0 ? 0 : is_even(n - 1); }
EXPORT long d_mutual(long a, long b) { return is_even(a & 63) * 10 + is_odd(b & 31); }

HELPER long tail_b(long x, long y) { return x * 7 + y; }
HELPER long tail_c(long x, long y) { return x - y * 3; }
EXPORT long d_tail_calls(long a, long b) {
  if (a & 1) return tail_b(a + 1, b);
  if (a & 2) return tail_c(a, b);
  return tail_b(a - 1, b + 2);
}

EXPORT long d_exported_callee(long a, long b) { return (a ^ b) + 3; }
EXPORT long d_calls_exported(long a, long b) {
  return d_exported_callee(a, b) * 2 + d_exported_callee(b, a);
}

HELPER long op_add(long x, long y) { return x + y; }
HELPER long op_sub(long x, long y) { return x - y; }
HELPER long op_mul(long x, long y) { return x * y; }
HELPER long op_xor(long x, long y) { return x ^ y; }
EXPORT long d_pointer_calls(long a, long b) {
  static long (*const ops[])(long, long) = {op_add, op_sub, op_mul, op_xor};
  long r = a;
  for (int i = 0; i < 6; ++i) r = ops[(b + i) & 3](r, b + i) & 0xfffffff;
  return r;
}

/* --- varargs, setjmp ---------------------------------------------------- */

HELPER long sum_va(int n, ...) {
  va_list ap;
  va_start(ap, n);
  long s = 0;
  for (int i = 0; i < n; ++i) s = s * 31 + va_arg(ap, long);
  va_end(ap);
  return s;
}
EXPORT long d_varargs(long a, long b) {
  return sum_va(0) + sum_va(2, a, b) + sum_va(9, a, b, a + b, a - b, 1L, 2L, 3L, a * 3, b * 5);
}

static jmp_buf d_jmp;
HELPER void bail(long code) { longjmp(d_jmp, (int)code); }
EXPORT long d_setjmp(long a, long b) {
  volatile long steps = 0;
  int code = setjmp(d_jmp);
  if (code != 0) return -code * 1000 - steps;
  for (long i = 0; i < 10; ++i) {
    steps = steps + 1;
    if ((a & 3) == 0 && i == (b & 7)) bail((a & 0xff) + 1);
  }
  return a * 2 + steps;
}

/* --- loops ---------------------------------------------------------------- */

EXPORT long d_nested_loops(long a, long b) {
  long r = 0;
  for (long i = 0; i < (a & 15); ++i)
    for (long j = 0; j < (b & 15); ++j) {
      if ((i + j) % 3 == 0) continue;
      if (i * j > 60) break;
      r += i * j - (i ^ j);
    }
  return r;
}

EXPORT long d_do_while(long a, long b) {
  unsigned long x = (unsigned long)a | 1;
  long n = 0;
  do {
    x = x & 1 ? 3 * x + 1 : x / 2;
    x &= 0xffffffff;
    ++n;
  } while (x != 1 && n < 500 + (b & 3));
  return n;
}

EXPORT long d_countdown(long a, long b) {
  unsigned long n = (unsigned long)a & 0xfff, r = (unsigned long)b;
  while (n--) r = r * 6364136223846793005ul + 1442695040888963407ul;
  return (long)(r >> 7);
}

EXPORT long d_bits(long a, long b) {
  unsigned long x = (unsigned long)a, y = (unsigned long)b;
  long r = __builtin_popcountl(x) * 100;
  r += x ? __builtin_clzl(x) : 64;
  r += y ? __builtin_ctzl(y) * 7 : 0;
  while (x) { r += x & 1; x >>= 3; }
  return r;
}

EXPORT long d_goto_machine(long a, long b) {
  long state = a & 3, n = 0, acc = b;
  unsigned long in = (unsigned long)a;
s0: if (n++ > 40) goto out; acc += 1; if (in & 1) { in >>= 1; goto s1; } in >>= 1; goto s2;
s1: if (n++ > 40) goto out; acc *= 3; if (in & 1) { in >>= 1; goto s2; } in >>= 1; goto s0;
s2: if (n++ > 40) goto out; acc ^= n; if (in & 1) { in >>= 1; goto s0; } in >>= 1; goto s1;
out:
  return acc + state;
}

/* --- memory, strings, data ---------------------------------------------- */

EXPORT long d_strings(long a, long b) {
  char buf[64], src[64];
  for (int i = 0; i < 64; ++i) src[i] = (char)('a' + (a + i * b) % 26);
  src[(a & 31) + 8] = 0;
  memset(buf, 'x', sizeof buf);
  memcpy(buf, src, (size_t)(b & 31));
  buf[63] = 0;
  return (long)strlen(src) * 1000 + (long)strlen(buf) + buf[b & 15];
}

EXPORT long d_struct_copy(long a, long b) {
  struct big { long v[12]; } x, y;
  for (int i = 0; i < 12; ++i) x.v[i] = a * i + b;
  y = x;
  y.v[a & 7] += 5;
  long r = 0;
  for (int i = 0; i < 12; ++i) r = r * 3 + y.v[i];
  return r;
}

static const long d_table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
static long d_counter;
EXPORT long d_static_data(long a, long b) {
  d_counter = d_counter * 0 + a;  /* written and read: rip-relative both ways */
  return d_table[a & 15] * b + d_table[b & 15] + d_counter;
}

EXPORT long d_floats(long a, long b) {
  double x = (double)(a & 0xffff) * 0.75 + 1.5;
  double y = (double)(b & 0xfff) / 3.0;
  float f = (float)x * 2.5f;
  return (long)(x * y) + (long)f + (x > y ? 7 : -7);
}

EXPORT long d_int128(long a, long b) {
  __int128 x = (__int128)a * b;
  unsigned __int128 y = (unsigned __int128)(unsigned long)a << 64 | (unsigned long)b;
  return (long)(x >> 32) ^ (long)(y % 1000003);
}

EXPORT long d_vla(long a, long b) {
  long n = (a & 31) + 1;
  long v[n];
  for (long i = 0; i < n; ++i) v[i] = i * b;
  long r = 0;
  for (long i = n - 1; i >= 0; i -= 2) r += v[i];
  return r;
}

EXPORT long d_aligned_local(long a, long b) {
  _Alignas(64) long v[8];
  for (int i = 0; i < 8; ++i) v[i] = a + i * b;
  return v[a & 7] + ((long)(unsigned long)&v[0] & 63);
}

/* --- branchy code ------------------------------------------------------- */

EXPORT long d_branchy(long a, long b) {
  long r = 0;
  if (a > b) r += 1;
  if (a < 0) r += 2; else if (a == 0) r += 4; else r += 8;
  if ((a ^ b) & 16) r *= 3;
  if (b > 1000 && a < -1000) r = -r;
  r += a > 5 ? b : a;
  r += (unsigned long)a < (unsigned long)b ? 100 : 200;
  return r;
}

EXPORT long d_unlikely(long a, long b) {
  if (__builtin_expect(a == 12345, 0)) {
    long r = 0;
    for (long i = 0; i < (b & 63); ++i) r += i * a;
    return r;
  }
  if (__builtin_expect(b < -100000, 0)) return d_switch_sparse(a, b) + 1;
  return a + b;
}

HELPER long min3(long x, long y, long z) { long m = x < y ? x : y; return m < z ? m : z; }
EXPORT long d_cmov(long a, long b) {
  return min3(a, b, a ^ b) + (a > 0 ? a : -a) + (b & 1 ? a : b);
}


/* --- noreturn calls at the end, computed goto --------------------------- */

/* The call to abort is never made, but gcc places it last: the function's
 * last instruction is a call whose fall-through is the next function. */
EXPORT long d_noreturn_guard(long a, long b) {
  if (a == 0x7fff0000deadL) abort();
  long r = b;
  for (long i = 0; i < (a & 15); ++i) r = r * 5 + i;
  return r;
}

EXPORT long d_computed_goto(long a, long b) {
  static const void* labels[] = {&&inc, &&dbl, &&neg, &&end};
  long acc = b, i = 0;
  unsigned long ops = (unsigned long)a;
#define NEXT goto *labels[i++ < 12 ? ops >> (2 * i) & 3 : 3]
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
