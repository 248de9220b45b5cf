// Checker threads for every register a signal frame carries (cpu_state.h).
#include "tests/programs/cpu_state.h"

#include <asm/prctl.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

namespace dyni::test {
namespace {

// What the checker stores each round, compared byte for byte with what it
// planted. Unused bytes stay zero in both.
struct alignas(64) StateImage {
  uint8_t vec[32][64];  // ymm0-15 (32 bytes each) or zmm0-31
  uint64_t k[8];        // opmask registers
  uint32_t mxcsr;
  uint16_t fcw;         // x87 control word
  uint16_t pad0;
  uint64_t st0;         // x87 st(0), stored as a double
  uint32_t pkru, pad1;
};
static_assert(offsetof(StateImage, k) == 2048 && offsetof(StateImage, mxcsr) == 2112 &&
              offsetof(StateImage, fcw) == 2116 && offsetof(StateImage, st0) == 2120 &&
              offsetof(StateImage, pkru) == 2128 && sizeof(StateImage) == 2176);

// Handed to the assembly in one register.
struct CheckContext {
  StateImage* seen;
  const StateImage* planted;
  uint64_t bytes;
  uint64_t has_pkru;
  std::atomic<uint64_t>* rounds;
};
static_assert(sizeof(CheckContext) == 40);

std::atomic<uint64_t> rounds{0};

[[noreturn]] void wrong_at(const char* what, uint64_t left, uint64_t bytes) {
  std::printf("WRONG %s at byte %llu\n", what, static_cast<unsigned long long>(bytes - left - 1));
  std::fflush(stdout);
  _exit(1);
}

bool cpu_has_ospke() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 4));
}

uint64_t xcr0() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

StateImage planted_image(int vector_regs, int vector_bytes, bool opmasks, bool pkru) {
  StateImage e{};
  for (int r = 0; r < vector_regs; ++r)
    for (int b = 0; b < vector_bytes; ++b) e.vec[r][b] = static_cast<uint8_t>(r * 17 + b * 3 + 1);
  if (opmasks)
    for (int i = 0; i < 8; ++i) e.k[i] = 0x0123456789abcdefULL ^ (uint64_t{0x1111} * static_cast<uint64_t>(i + 1));
  e.mxcsr = 0xff80;  // flush-to-zero, round toward zero, exceptions masked
  e.fcw = 0x027f;    // double precision, exceptions masked
  double pi = 3.141592653589793;
  std::memcpy(&e.st0, &pi, 8);
  if (pkru) e.pkru = 0x55555550;  // key 0 open as ever; key 1 opened (init: 0)
  return e;
}

// The common tail of both checkers: MXCSR, x87 and PKRU, planted (P) and
// stored (S); then compare and count.
#define DYNI_PLANT_SCALAR                                                        \
  "ldmxcsr 2112(%%r10)\n fldcw 2116(%%r10)\n fldl 2120(%%r10)\n"                \
  "test %%r12, %%r12\n jz 3f\n mov 2128(%%r10), %%eax\n xor %%ecx, %%ecx\n"     \
  "xor %%edx, %%edx\n wrpkru\n 3:\n"
#define DYNI_STORE_AND_COMPARE                                                   \
  "stmxcsr 2112(%%r9)\n fnstcw 2116(%%r9)\n fstl 2120(%%r9)\n"                  \
  "test %%r12, %%r12\n jz 4f\n xor %%ecx, %%ecx\n rdpkru\n mov %%eax, 2128(%%r9)\n 4:\n" \
  "mov %%r9, %%rsi\n mov %%r10, %%rdi\n mov %%r11, %%rcx\n cld\n repe cmpsb\n jne 2f\n" \
  "lock incq (%%r13)\n jmp 1b\n"                                                \
  "2:\n mov %%rcx, %[left]\n"
#define DYNI_LOAD_CONTEXT \
  "mov 0(%[c]), %%r9\n mov 8(%[c]), %%r10\n mov 16(%[c]), %%r11\n mov 24(%[c]), %%r12\n mov 32(%[c]), %%r13\n"
#define DYNI_GPR_CLOBBERS "rax", "rcx", "rdx", "rsi", "rdi", "r9", "r10", "r11", "r12", "r13", "memory", "cc"

__attribute__((target("avx2"))) [[noreturn]] void check_avx(CheckContext ctx) {
  uint64_t left = 0;
#define Y(i) "vmovdqu " #i "*64(%%r10), %%ymm" #i "\n"
#define S(i) "vmovdqu %%ymm" #i ", " #i "*64(%%r9)\n"
  asm volatile(DYNI_LOAD_CONTEXT
               Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11) Y(12) Y(13) Y(14) Y(15)
               DYNI_PLANT_SCALAR "1:\n"
               S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11) S(12) S(13) S(14) S(15)
               DYNI_STORE_AND_COMPARE
               : [left] "=m"(left)
               : [c] "r"(&ctx)
               : DYNI_GPR_CLOBBERS, "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                 "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#undef Y
#undef S
  wrong_at("avx/x87/mxcsr/pkru state", left, ctx.bytes);
}

__attribute__((target("avx512f,avx512bw"))) [[noreturn]] void check_avx512(CheckContext ctx) {
  uint64_t left = 0;
#define Z(i) "vmovdqu64 " #i "*64(%%r10), %%zmm" #i "\n"
#define S(i) "vmovdqu64 %%zmm" #i ", " #i "*64(%%r9)\n"
#define KL(i) "kmovq 2048+" #i "*8(%%r10), %%k" #i "\n"
#define KS(i) "kmovq %%k" #i ", 2048+" #i "*8(%%r9)\n"
  asm volatile(DYNI_LOAD_CONTEXT
               Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12) Z(13) Z(14) Z(15)
               Z(16) Z(17) Z(18) Z(19) Z(20) Z(21) Z(22) Z(23) Z(24) Z(25) Z(26) Z(27) Z(28) Z(29) Z(30) Z(31)
               KL(0) KL(1) KL(2) KL(3) KL(4) KL(5) KL(6) KL(7)
               DYNI_PLANT_SCALAR "1:\n"
               S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11) S(12) S(13) S(14) S(15)
               S(16) S(17) S(18) S(19) S(20) S(21) S(22) S(23) S(24) S(25) S(26) S(27) S(28) S(29) S(30) S(31)
               KS(0) KS(1) KS(2) KS(3) KS(4) KS(5) KS(6) KS(7)
               DYNI_STORE_AND_COMPARE
               : [left] "=m"(left)
               : [c] "r"(&ctx)
               : DYNI_GPR_CLOBBERS, "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                 "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",
                 "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30",
                 "xmm31", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
#undef Z
#undef S
#undef KL
#undef KS
  wrong_at("avx512/opmask/x87/mxcsr/pkru state", left, ctx.bytes);
}

// AMX: eight 16x64-byte tiles planted, then stored and compared each round
// (with the tile configuration). Needs the kernel's permission first.
struct alignas(64) TileImage {
  uint8_t config[64];
  uint8_t tiles[8][1024];
};

[[noreturn]] void check_amx(TileImage* planted, TileImage* seen) {
  uint64_t left = 0;
#define TL(i) "tileloadd (%%r10,%%r11,1), %%tmm" #i "\n add $1024, %%r10\n"
#define TS(i) "tilestored %%tmm" #i ", (%%r9,%%r11,1)\n add $1024, %%r9\n"
  asm volatile(
      "mov %[p], %%r10\n ldtilecfg (%%r10)\n add $64, %%r10\n mov $64, %%r11\n"
      TL(0) TL(1) TL(2) TL(3) TL(4) TL(5) TL(6) TL(7)
      "1:\n mov %[s], %%r9\n sttilecfg (%%r9)\n add $64, %%r9\n"
      TS(0) TS(1) TS(2) TS(3) TS(4) TS(5) TS(6) TS(7)
      "mov %[s], %%rsi\n mov %[p], %%rdi\n mov %[n], %%rcx\n cld\n repe cmpsb\n jne 2f\n"
      "lock incq %[rounds]\n jmp 1b\n"
      "2:\n mov %%rcx, %[left]\n"
      : [left] "=m"(left), [rounds] "+m"(rounds)
      : [p] "r"(planted), [s] "r"(seen), [n] "i"(sizeof(TileImage))
      : "rcx", "rsi", "rdi", "r9", "r10", "r11", "memory", "cc");
#undef TL
#undef TS
  wrong_at("amx tiles", left, sizeof(TileImage));
}

bool start_amx_checker() {
  unsigned a, b, c, d;
  constexpr uint64_t kTiles = (uint64_t{1} << 17) | (uint64_t{1} << 18);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || (xcr0() & kTiles) != kTiles) return false;
  if (::syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, 18) != 0) return false;
  static TileImage planted{}, seen{};
  planted.config[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    planted.config[16 + 2 * t] = 64;  // bytes per row
    planted.config[48 + t] = 16;      // rows
    for (int i = 0; i < 1024; ++i) planted.tiles[t][i] = static_cast<uint8_t>(t * 31 + i * 5 + 3);
  }
  std::thread([] { check_amx(&planted, &seen); }).detach();
  return true;
}

void start_vector_checker(bool avx512, bool pkru) {
  static StateImage planted, seen;
  planted = planted_image(avx512 ? 32 : 16, avx512 ? 64 : 32, avx512, pkru);
  std::memset(&seen, 0, sizeof seen);
  CheckContext ctx{&seen, &planted, sizeof(StateImage), pkru ? 1u : 0u, &rounds};
  if (avx512)
    std::thread([ctx] { check_avx512(ctx); }).detach();
  else
    std::thread([ctx] { check_avx(ctx); }).detach();
}

}  // namespace

std::string start_cpu_state_checkers() {
  if (!__builtin_cpu_supports("avx2")) return "";
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  bool pkru = cpu_has_ospke();
  start_vector_checker(avx512, pkru);
  std::string names = avx512 ? "avx512 opmask" : "avx";
  if (pkru) names += " pkru";
  names += " x87 mxcsr";
  if (start_amx_checker()) names += " amx";
  return names;
}

}  // namespace dyni::test
