// Short jumps to pads between functions, as measured for issue 23
// (jit/entry_pads.h): where a 2-byte jump can go, which gaps are padding,
// and how many spots get a pad of their own.
#include <gtest/gtest.h>

#include "jit/cfg.h"
#include "jit/entry_pads.h"
#include "jit/module_image.h"
#include "tests/unit/assembler.h"

namespace dyni::jit {
namespace {

constexpr uint64_t kBase = 0x401000;

// `text` assembled at kBase as one function; its cfg.
FunctionCfg cfg_of(const std::string& text, ModuleImage& image, std::vector<uint8_t>& code) {
  auto bytes = test::assemble(text);
  EXPECT_TRUE(bytes) << bytes.error().message();
  code = bytes ? *bytes : std::vector<uint8_t>{0xc3};
  image = ModuleImage();
  image.add(kBase, code, true);
  auto built = build_cfg(elf::Function{kBase, code.size(), "f", false, 0}, image);
  EXPECT_TRUE(built) << built.error().message();
  return built ? std::move(*built) : FunctionCfg{};
}

TEST(EntryPads, AShortJumpGoesIntoTheFirstRexInstructionOfThreeBytesBeforeABranch) {
  ModuleImage image;
  std::vector<uint8_t> code;
  // push rbp (1 byte), then mov rbp, rsp (48 89 e5): the spot.
  FunctionCfg cfg = cfg_of("push rbp\nmov rbp, rsp\ntest edi, edi\nje out\nmov eax, 1\nout:\npop rbp\nret", image, code);
  EXPECT_EQ(short_jump_spot(cfg), std::optional<uint64_t>(kBase + 1));
  // No REX instruction before the branch: none.
  cfg = cfg_of("push rbx\nmov eax, edi\ntest eax, eax\nje out\nadd eax, 1\nout:\npop rbx\nret", image, code);
  EXPECT_EQ(short_jump_spot(cfg), std::nullopt);
  // A REX instruction only after the first branch: none.
  cfg = cfg_of("test edi, edi\nje out\nmov rax, rdi\nout:\nret", image, code);
  EXPECT_EQ(short_jump_spot(cfg), std::nullopt);
  // A 2-byte REX instruction (48 99, cqo) is too short; the next one serves.
  cfg = cfg_of("cqo\nmov rax, rdx\nret", image, code);
  EXPECT_EQ(short_jump_spot(cfg), std::optional<uint64_t>(kBase + 2));
}

TEST(EntryPads, OnlyGapsOfNopsAndInt3sBetweenFunctionsArePadding) {
  // f at +0 (ret), 15 bytes of nops, g at +16 (ret), 3 bytes of nops, h at
  // +20 (ret), 6 bytes of data, k at +27 (ret), 8 int3s, m at +36.
  std::vector<uint8_t> bytes = {0xc3,
                                0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x1f, 0x40, 0x00, 0x90,
                                0xc3, 0x0f, 0x1f, 0x00,
                                0xc3, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
                                0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
                                0xc3};
  ModuleImage image;
  image.add(kBase, bytes, true);
  std::vector<elf::Function> functions = {{kBase + 36, 1, "m", false, 0}, {kBase, 1, "f", false, 0},
                                          {kBase + 16, 1, "g", false, 0}, {kBase + 20, 1, "h", false, 0},
                                          {kBase + 27, 1, "k", false, 0}};
  std::vector<PaddingRun> runs = padding_runs(functions, image);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].start, kBase + 1);
  EXPECT_EQ(runs[0].end, kBase + 16);
  EXPECT_EQ(runs[1].start, kBase + 28);
  EXPECT_EQ(runs[1].end, kBase + 36);
  // A function that covers a gap leaves no padding there.
  functions.push_back({kBase, 16, "f_whole", false, 0});
  EXPECT_EQ(padding_runs(functions, image).size(), 1u);
}

TEST(EntryPads, EachSpotGetsAPadOfItsOwnWithinAShortJumpsReach) {
  // One run of 10 bytes: two pads.
  const std::vector<PaddingRun> runs = {{1000, 1010}};
  EXPECT_EQ(spots_with_pads({900, 950, 980}, runs), 2u) << "two pads for three spots in reach";
  // rel8 counts from the jump's end (spot + 3): a pad may start at most 127
  // after it and at least 128 before it.
  EXPECT_EQ(spots_with_pads({1000 - 127 - kShortJumpSize}, runs), 1u);
  EXPECT_EQ(spots_with_pads({1000 - 128 - kShortJumpSize}, runs), 0u);
  EXPECT_EQ(spots_with_pads({1005 + 128 - kShortJumpSize}, runs), 1u) << "the run's last pad, behind the spot";
  EXPECT_EQ(spots_with_pads({1006 + 128 - kShortJumpSize}, runs), 0u) << "no whole pad within reach behind it";
  EXPECT_EQ(spots_with_pads({900}, {}), 0u);
}

}  // namespace
}  // namespace dyni::jit
