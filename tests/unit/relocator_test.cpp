// Byte-exact relocation of single instructions, each annotated with its
// disassembly, and in-process execution of whole relocated functions.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <random>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/cfg.h"
#include "jit/decoder.h"
#include "jit/emitter.h"
#include "jit/relocator.h"
#include "jit/verifier.h"
#include "tests/unit/this_binary.h"

extern "C" int jit_switch(int, int);
extern "C" long jit_loop(const int*, int);

namespace dyni::jit {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes moved(Bytes original, uint64_t from, uint64_t to, std::optional<uint64_t> target = {}) {
  auto in = decode_one(original, from);
  EXPECT_TRUE(in) << in.error().message();
  auto out = relocate(*in, to, target);
  EXPECT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->size(), relocated_length(*in));
  return out ? *out : Bytes{};
}

TEST(Relocator, ByteExact) {
  // 48 89 c3            mov rbx, rax                 (no PC-relative operand: copied)
  EXPECT_EQ(moved({0x48, 0x89, 0xc3}, 0x1000, 0x2000), (Bytes{0x48, 0x89, 0xc3}));
  // 48 8b 05 10 00 00 00  mov rax, [rip+0x10] → [0x1017]; at 0x2000 disp = 0x1017-0x2007 = -0xff0
  EXPECT_EQ(moved({0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, 0x1000, 0x2000),
            (Bytes{0x48, 0x8b, 0x05, 0x10, 0xf0, 0xff, 0xff}));
  // c7 05 10 00 00 00 2a 00 00 00  mov dword [rip+0x10], 42 (disp before imm) → disp -0xff0
  EXPECT_EQ(moved({0xc7, 0x05, 0x10, 0, 0, 0, 0x2a, 0, 0, 0}, 0x1000, 0x2000),
            (Bytes{0xc7, 0x05, 0x10, 0xf0, 0xff, 0xff, 0x2a, 0, 0, 0}));
  // e8 10 00 00 00      call 0x1015 → from 0x2000: rel = 0x1015-0x2005 = -0xff0
  EXPECT_EQ(moved({0xe8, 0x10, 0, 0, 0}, 0x1000, 0x2000), (Bytes{0xe8, 0x10, 0xf0, 0xff, 0xff}));
  // 74 05               je 0x1007 → 0f 84 rel32, rel = 0x1007-0x2006 = -0xfff
  EXPECT_EQ(moved({0x74, 0x05}, 0x1000, 0x2000), (Bytes{0x0f, 0x84, 0x01, 0xf0, 0xff, 0xff}));
  // eb fe               jmp self, retargeted to its new copy → e9 fb ff ff ff
  EXPECT_EQ(moved({0xeb, 0xfe}, 0x1000, 0x2000, 0x2000), (Bytes{0xe9, 0xfb, 0xff, 0xff, 0xff}));
  // 0f 85 00 01 00 00   jne 0x1106 → rel = 0x1106-0x2006 = -0xf00
  EXPECT_EQ(moved({0x0f, 0x85, 0, 1, 0, 0}, 0x1000, 0x2000), (Bytes{0x0f, 0x85, 0x00, 0xf1, 0xff, 0xff}));
  // e3 02               jrcxz 0x1004 → e3 02 / eb 05 / e9 rel32 (0x1004-0x2009 = -0x1005)
  EXPECT_EQ(moved({0xe3, 0x02}, 0x1000, 0x2000),
            (Bytes{0xe3, 0x02, 0xeb, 0x05, 0xe9, 0xfb, 0xef, 0xff, 0xff}));
  // 67 e3 02            jecxz 0x1005 (0x67 prefix kept) → rel = 0x1005-0x200a = -0x1005
  EXPECT_EQ(moved({0x67, 0xe3, 0x02}, 0x1000, 0x2000),
            (Bytes{0x67, 0xe3, 0x02, 0xeb, 0x05, 0xe9, 0xfb, 0xef, 0xff, 0xff}));
  // e2 fe               loop self → e2 02 / eb 05 / e9 (0x1000-0x2009 = -0x1009)
  EXPECT_EQ(moved({0xe2, 0xfe}, 0x1000, 0x2000),
            (Bytes{0xe2, 0x02, 0xeb, 0x05, 0xe9, 0xf7, 0xef, 0xff, 0xff}));
}

Bytes moved_short(Bytes original, uint64_t from, uint64_t to, uint64_t target, bool inverted = false) {
  auto in = decode_one(original, from);
  EXPECT_TRUE(in) << in.error().message();
  auto out = inverted ? relocate_inverted(*in, to, target, BranchWidth::Short)
                      : relocate(*in, to, target, BranchWidth::Short);
  EXPECT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->size(), relocated_length(*in, BranchWidth::Short));
  return out ? *out : Bytes{};
}

TEST(Relocator, ShortFormsOfJmpAndJcc) {
  // 0f 85 00 01 00 00   jne rel32, retargeted to 0x2010 from 0x2000 → 75 0e
  EXPECT_EQ(moved_short({0x0f, 0x85, 0, 1, 0, 0}, 0x1000, 0x2000, 0x2010), (Bytes{0x75, 0x0e}));
  // e9 00 00 00 00      jmp rel32 back to 0x1f80: 0x1f80-0x2002 = -0x82, out of rel8 reach
  auto far = decode_one(Bytes{0xe9, 0, 0, 0, 0}, 0x1000);
  ASSERT_TRUE(far);
  EXPECT_FALSE(relocate(*far, 0x2000, 0x1f80, BranchWidth::Short));
  // -0x80 is the farthest back: 0x1f82 → eb 80
  EXPECT_EQ(moved_short({0xe9, 0, 0, 0, 0}, 0x1000, 0x2000, 0x1f82), (Bytes{0xeb, 0x80}));
  // 3e 74 05            je with a hint prefix, the prefix dropped → 74 7f (0x2081 is the farthest ahead)
  EXPECT_EQ(moved_short({0x3e, 0x74, 0x05}, 0x1000, 0x2000, 0x2081), (Bytes{0x74, 0x7f}));
  // 72 05               jb, inverted → jae (73) to 0x2002 + 3
  EXPECT_EQ(moved_short({0x72, 0x05}, 0x1000, 0x2000, 0x2005, true), (Bytes{0x73, 0x03}));
  // Only jmp and jcc have a short form: not call, loop, jrcxz, xbegin.
  for (Bytes b : {Bytes{0xe8, 0, 0, 0, 0}, Bytes{0xe2, 0xfe}, Bytes{0xe3, 0x02}, Bytes{0xc7, 0xf8, 0, 0, 0, 0}}) {
    auto in = decode_one(b, 0x1000);
    ASSERT_TRUE(in);
    EXPECT_FALSE(can_be_short(*in)) << in->mnemonic;
    EXPECT_FALSE(relocate(*in, 0x2000, 0x2004, BranchWidth::Short));
    EXPECT_EQ(relocated_length(*in, BranchWidth::Short), relocated_length(*in));
  }
}

// Branches whose target's copy is within rel8 reach get the short form; the
// others, and every exit, stay rel32; the verifier accepts both.
TEST(Emitter, ShortensBranchesWithinReachOnly) {
  // 0x1000: test edi,edi; je +0x80 (to the ret past 128 nops); jne -4 (to
  // itself's block start: the test); 128 × nop; ret
  Bytes fn = {0x85, 0xff, 0x0f, 0x84, 0x82, 0, 0, 0, 0x75, 0xf6};
  fn.insert(fn.end(), 128, 0x90);
  fn.push_back(0xc3);
  ModuleImage image;
  image.add(0x1000, fn, true);
  auto built = build_cfg(elf::Function{0x1000, fn.size(), "f", false, 0}, image);
  ASSERT_TRUE(built) << built.error().message();
  auto code = emit_in_order(*built, 0x5000);
  ASSERT_TRUE(code) << code.error().message();
  EXPECT_TRUE(verify(*built, *code));
  // je over 128 + 2 bytes stays near; jne back to the test (8 bytes) is short.
  ASSERT_GE(code->bytes.size(), 10u);
  EXPECT_EQ(code->bytes[2], 0x0f);
  EXPECT_EQ(code->bytes[3], 0x84);
  EXPECT_EQ(code->bytes[8], 0x75);
  EXPECT_EQ(code->bytes[9], 0xf6);
  EXPECT_EQ(code->bytes.size(), fn.size());
  EXPECT_EQ(code->code_size, emitted_size(*built, original_layout(*built), 0x5000));
}

TEST(Verifier, CatchesAMisaimedBranchAndAChangedByte) {
  std::vector<uint8_t> fn = {0x85, 0xff, 0x74, 0x01, 0x90, 0xc3};  // test; je ret; nop; ret
  ModuleImage image;
  image.add(0x1000, fn, true);
  auto built = build_cfg(elf::Function{0x1000, fn.size(), "f", false, 0}, image);
  ASSERT_TRUE(built) << built.error().message();
  const FunctionCfg& cfg = *built;
  auto code = emit_in_order(cfg, 0x5000);
  ASSERT_TRUE(code);
  EXPECT_TRUE(verify(cfg, *code));
  ASSERT_EQ(code->bytes, fn) << "je to a copy within reach keeps its rel8 form";
  auto bad_branch = *code;
  bad_branch.bytes[3] += 1;  // je rel8 now lands one byte off
  EXPECT_FALSE(verify(cfg, bad_branch));
  auto bad_byte = *code;
  bad_byte.bytes[1] = 0xf6;  // test esi, edi
  EXPECT_FALSE(verify(cfg, bad_byte));
}

TEST(Relocator, RefusesBeyondTwoGigabytes) {
  Bytes load = {0x48, 0x8b, 0x05, 0x10, 0, 0, 0};
  auto in = decode_one(load, 0x1000);
  ASSERT_TRUE(in);
  auto out = relocate(*in, 0x100001000ull);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message(), "PC-relative operand beyond ±2 GB at 0x1000");
}

// Relocated copies of real functions, placed near the test binary, compute
// what the originals compute (jump tables keep pointing at the original code).
class InProcess : public ThisBinary {
 protected:
  void SetUp() override {
    ThisBinary::SetUp();
    if (HasFatalFailure()) return;
    // Link-time → runtime: the bias of this PIE, from a known function.
    for (const auto& fn : table->functions())
      if (fn.name == "jit_loop") bias = reinterpret_cast<uint64_t>(&jit_loop) - fn.addr;
    ASSERT_NE(bias, 0u);
    // A buffer within ±2 GB of the code: 64 MiB above the function.
    uint64_t hint = (reinterpret_cast<uint64_t>(&jit_loop) + (64 << 20)) & ~0xfffull;
    for (int i = 0; i < 64 && buffer == MAP_FAILED; ++i, hint += 1 << 20)
      buffer = mmap(reinterpret_cast<void*>(hint), 1 << 16, PROT_READ | PROT_WRITE | PROT_EXEC,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_NE(buffer, MAP_FAILED);
  }
  void TearDown() override {
    if (buffer != MAP_FAILED) munmap(buffer, 1 << 16);
  }
  // Relocates `name` into the buffer; returns the copy's entry.
  void* copy_of(const std::string& name) {
    const elf::Function* fn = named(name);
    EXPECT_NE(fn, nullptr);
    auto cfg = build_cfg(*fn, *image);
    EXPECT_TRUE(cfg) << cfg.error().message();
    // PC-relative code is the same at any bias: emit in link-time numbering
    // for a cache whose link-time address is the buffer's minus the bias.
    uint64_t base = reinterpret_cast<uint64_t>(buffer) - bias;
    auto code = emit_in_order(*cfg, base);
    EXPECT_TRUE(code) << code.error().message();
    std::memcpy(buffer, code->bytes.data(), code->bytes.size());
    __builtin___clear_cache(static_cast<char*>(buffer), static_cast<char*>(buffer) + code->bytes.size());
    EXPECT_EQ(code->translation.front().original_addr, fn->addr);
    auto checked = verify(*cfg, *code);
    EXPECT_TRUE(checked) << checked.error().message();
    return buffer;
  }
  uint64_t bias = 0;
  void* buffer = MAP_FAILED;
};

TEST_F(InProcess, LoopComputesTheSame) {
  auto copy = reinterpret_cast<long (*)(const int*, int)>(copy_of("jit_loop"));
  std::mt19937 rng(7);
  std::vector<int> v(1000);
  for (int& x : v) x = static_cast<int>(rng() % 2001) - 1000;
  for (int n : {0, 1, 2, 3, 4, 5, 17, 100, 999, 1000}) EXPECT_EQ(copy(v.data(), n), jit_loop(v.data(), n)) << n;
}

TEST_F(InProcess, SwitchWithJumpTableComputesTheSame) {
  auto copy = reinterpret_cast<int (*)(int, int)>(copy_of("jit_switch"));
  for (int x = -3; x < 12; ++x)
    for (int y : {-1000, -7, 0, 1, 13, 99999}) EXPECT_EQ(copy(x, y), jit_switch(x, y)) << x << "," << y;
}

}  // namespace
}  // namespace dyni::jit
