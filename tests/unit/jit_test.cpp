// jit/ on plain buffers and on real compiled functions: decoding facts,
// CFG shapes, jump tables, and every rejection reason.
#include <gtest/gtest.h>

#include <vector>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/block_profile.h"
#include "jit/cfg.h"
#include "jit/decoder.h"
#include "jit/module_image.h"
#include "tests/unit/this_binary.h"

extern "C" int jit_switch(int, int);
extern "C" long jit_loop(const int*, int);

namespace dyni::jit {
namespace {

constexpr uint64_t kBase = 0x401000;

Instruction decode(std::vector<uint8_t> bytes, uint64_t addr = kBase) {
  auto in = decode_one(bytes, addr);
  EXPECT_TRUE(in) << in.error().message();
  return in ? *in : Instruction{};
}

TEST(Decoder, FlowAndTargets) {
  Instruction call = decode({0xe8, 0x10, 0x00, 0x00, 0x00});  // call +0x10
  EXPECT_EQ(call.flow, Flow::Call);
  EXPECT_EQ(call.target, kBase + 5 + 0x10);
  Instruction je = decode({0x74, 0xfe});  // je self
  EXPECT_EQ(je.flow, Flow::CondBranch);
  EXPECT_EQ(je.target, kBase);
  Instruction jmp = decode({0xe9, 0x00, 0x01, 0x00, 0x00});  // jmp +0x100
  EXPECT_EQ(jmp.flow, Flow::Branch);
  EXPECT_EQ(jmp.target, kBase + 5 + 0x100);
  Instruction load = decode({0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00});  // mov rax,[rip+0x10]
  EXPECT_EQ(load.flow, Flow::Next);
  EXPECT_TRUE(load.rip_relative);
  EXPECT_EQ(load.rip_address, kBase + 7 + 0x10);
  EXPECT_EQ(decode({0xff, 0xe0}).flow, Flow::IndirectBranch);  // jmp rax
  EXPECT_EQ(decode({0xff, 0xd0}).flow, Flow::IndirectCall);    // call rax
  EXPECT_EQ(decode({0xc3}).flow, Flow::Return);
  EXPECT_EQ(decode({0xcc}).flow, Flow::Stop);
  EXPECT_EQ(decode({0x0f, 0x0b}).flow, Flow::Stop);            // ud2
  EXPECT_EQ(decode({0xe3, 0x02}).flow, Flow::CondBranch);      // jrcxz
  EXPECT_EQ(decode({0xe2, 0xfe}).flow, Flow::CondBranch);      // loop
  EXPECT_EQ(decode({0xf3, 0x0f, 0x1e, 0xfa}).flow, Flow::Next); // endbr64
}

TEST(Decoder, RefusesUndecodableBytes) {
  std::vector<uint8_t> bad = {0x06};  // push es: invalid in 64-bit mode
  auto r = decode_one(bad, kBase);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "undecodable bytes at 0x401000");
  std::vector<uint8_t> truncated = {0xe8, 0x00};
  EXPECT_FALSE(decode_one(truncated, kBase));
}

// Builds the CFG of `code` placed at kBase as one function.
Result<FunctionCfg> cfg_of(const std::vector<uint8_t>& code) {
  static std::vector<std::vector<uint8_t>> keep;  // the image refers to the bytes
  keep.push_back(code);
  ModuleImage image;
  image.add(kBase, keep.back(), true);
  return build_cfg(elf::Function{kBase, code.size(), "f", true, 0}, image);
}

TEST(Cfg, DiamondWithLoop) {
  // 0: test edi,edi / 2: je +4 (→8) / 4: mov eax,1 ... simplified: 
  std::vector<uint8_t> code = {
      0x85, 0xff,                    // 0  test edi, edi
      0x74, 0x07,                    // 2  je 0xb
      0xb8, 0x01, 0x00, 0x00, 0x00,  // 4  mov eax, 1
      0xeb, 0x05,                    // 9  jmp 0x10
      0xb8, 0x02, 0x00, 0x00, 0x00,  // b  mov eax, 2
      0xff, 0xcf,                    // 10 dec edi
      0x7f, 0xfc,                    // 12 jg 0x10
      0xc3,                          // 14 ret
  };
  auto cfg = cfg_of(code);
  ASSERT_TRUE(cfg) << cfg.error().message();
  ASSERT_EQ(cfg->blocks.size(), 5u);
  EXPECT_EQ(cfg->blocks[0].successors, (std::vector<uint64_t>{kBase + 4, kBase + 0xb}));
  EXPECT_EQ(cfg->blocks[1].successors, (std::vector<uint64_t>{kBase + 0x10}));
  EXPECT_EQ(cfg->blocks[3].start, kBase + 0x10);
  EXPECT_EQ(cfg->blocks[3].successors, (std::vector<uint64_t>{kBase + 0x10, kBase + 0x14}));
  EXPECT_TRUE(cfg->blocks[4].exits);
  EXPECT_EQ(cfg->block_at(kBase + 0x12), &cfg->blocks[3]);
}

TEST(Cfg, TailCallsAndCallsLeaveTheFunction) {
  std::vector<uint8_t> code = {
      0xe8, 0x00, 0x10, 0x00, 0x00,  // call far away
      0x85, 0xc0,                    // test eax, eax
      0x0f, 0x85, 0x00, 0x20, 0x00, 0x00,  // jne far away (conditional tail call)
      0xe9, 0x00, 0x30, 0x00, 0x00,  // jmp far away (tail call)
  };
  auto cfg = cfg_of(code);
  ASSERT_TRUE(cfg) << cfg.error().message();
  ASSERT_EQ(cfg->blocks.size(), 2u);
  EXPECT_TRUE(cfg->blocks[0].exits);
  EXPECT_EQ(cfg->blocks[0].successors, (std::vector<uint64_t>{kBase + 0xd}));
  EXPECT_TRUE(cfg->blocks[1].exits);
}

TEST(BlockProfile, SumsInstructionSamplesAndSaysHowSure) {
  std::vector<uint8_t> code = {
      0x85, 0xff, 0x74, 0x07,                    // block 0: test; je 0xb
      0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x05,  // block 1: mov; jmp 0x10
      0xb8, 0x02, 0x00, 0x00, 0x00,              // block 2: mov
      0xff, 0xcf, 0x7f, 0xfc,                    // block 3: dec; jg 0x10
      0xc3,                                      // block 4: ret
  };
  auto cfg = cfg_of(code);
  ASSERT_TRUE(cfg);
  // Samples by offset: 40 at block 0, none in block 2, 900 in the loop.
  std::map<uint64_t, uint64_t> hist = {{0, 30}, {2, 10}, {4, 3}, {0x10, 500}, {0x12, 400}, {0x14, 1}};
  auto counts = block_counts(*cfg, hist);
  ASSERT_EQ(counts.size(), 5u);
  EXPECT_EQ(counts[0].samples, 40u);
  EXPECT_EQ(counts[1].samples, 3u);
  EXPECT_EQ(counts[2].samples, 0u);
  EXPECT_EQ(counts[3].samples, 900u);
  EXPECT_EQ(counts[4].samples, 1u);
  EXPECT_FALSE(counts[2].known_hot()) << "no samples: unknown, not proven cold";
  EXPECT_GT(counts[2].high, 3.0) << "zero samples still allow a rate of ~3.7";
  EXPECT_TRUE(counts[3].known_hot());
  EXPECT_NEAR(counts[3].low, 842.7, 3.0);   // exact Garwood: 842.3
  EXPECT_NEAR(counts[3].high, 960.3, 3.0);  // exact Garwood: 960.1
  auto [low1, high1] = poisson_interval_95(1);
  EXPECT_NEAR(low1, 0.0253, 0.01);
  EXPECT_NEAR(high1, 5.572, 0.1);
}

std::string reason(const std::vector<uint8_t>& code) {
  auto cfg = cfg_of(code);
  return cfg ? "accepted" : cfg.error().message();
}

TEST(Cfg, RejectsWhatItDoesNotUnderstand) {
  EXPECT_EQ(reason({0xff, 0xe0}), "indirect jump unresolved at 0x401000");
  EXPECT_EQ(reason({0x74, 0x01, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3}),
            "branch into the middle of an instruction at 0x401000");
  EXPECT_EQ(reason({0x90, 0x90}), "falls off the end of the function at 0x401001");
  EXPECT_EQ(reason({0x8b, 0x05, 0xfa, 0xff, 0xff, 0xff, 0xc3}),  // mov eax,[rip-6]: its own bytes
            "code reads its own bytes at 0x401000");
  EXPECT_EQ(reason({0x48, 0x8d, 0x05, 0x01, 0x00, 0x00, 0x00, 0xc3, 0xc3}),  // lea rax,[rip+1]
            "code address taken at 0x401000");
  EXPECT_EQ(reason({0x90, 0x06, 0xc3}), "data in code: undecodable bytes at 0x401001");
  EXPECT_EQ(reason_kind("data in code: undecodable bytes at 0x401001"), "data in code");
  EXPECT_EQ(reason_kind("indirect jump unresolved at 0x401000"), "indirect jump unresolved");
}

using RealFunctions = ThisBinary;

TEST_F(RealFunctions, SwitchBecomesAResolvedJumpTable) {
  ASSERT_EQ(jit_switch(3, 9), 44);
  const elf::Function* f = named("jit_switch");
  ASSERT_NE(f, nullptr);
  auto cfg = build_cfg(*f, *image);
  ASSERT_TRUE(cfg) << cfg.error().message();
  ASSERT_EQ(cfg->tables.size(), 1u);
  EXPECT_EQ(cfg->tables[0].targets.size(), 8u);
  EXPECT_EQ(cfg->tables[0].entry_size, 4u);
  for (uint64_t t : cfg->tables[0].targets) EXPECT_NE(cfg->block_at(t), nullptr);
}

TEST_F(RealFunctions, LoopHasABackEdge) {
  int v[] = {1, 2, 3};
  ASSERT_EQ(jit_loop(v, 3), 2 + 2 + 3);
  const elf::Function* f = named("jit_loop");
  ASSERT_NE(f, nullptr);
  auto cfg = build_cfg(*f, *image);
  ASSERT_TRUE(cfg) << cfg.error().message();
  bool back_edge = false;
  for (const Block& b : cfg->blocks)
    for (uint64_t s : b.successors) back_edge |= s <= b.start;
  EXPECT_TRUE(back_edge);
}

// Every function of this test binary and of libc either analyses or is
// rejected with a reason; nothing crashes and most are accepted.
TEST_F(RealFunctions, WholeBinariesAnalyse) {
  for (const char* path : {"/proc/self/exe", "/lib/x86_64-linux-gnu/libc.so.6"}) {
    auto f = elf::ElfFile::open(path);
    ASSERT_TRUE(f);
    auto t = elf::FunctionTable::build(*f);
    ASSERT_TRUE(t);
    ModuleImage img(*f);
    std::size_t ok = 0, all = 0;
    for (const auto& fn : t->functions()) {
      if (!img.is_code(fn.addr)) continue;
      ++all;
      auto cfg = build_cfg(fn, img);
      if (cfg) ++ok;
      else EXPECT_FALSE(reason_kind(cfg.error().message()).empty());
    }
    EXPECT_GT(static_cast<double>(ok), 0.9 * static_cast<double>(all)) << path;
  }
}

}  // namespace
}  // namespace dyni::jit
