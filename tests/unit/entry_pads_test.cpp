// Short jumps to pads between functions (jit/entry_pads.h, issue 23): where
// a 2-byte jump can go, which gaps are padding, which pad is whose, and the
// entry patch through one.
#include <gtest/gtest.h>

#include <cstring>

#include "jit/cfg.h"
#include "jit/entry_pads.h"
#include "jit/module_image.h"
#include "jit/patch_plan.h"
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

// f (`before`, then nops to +16), g at +16 (`g_text`), nops (`gap_after`
// bytes), h (ret): the image, and g's cfg with its short-jump spot.
struct Module {
  std::vector<uint8_t> bytes;  // the image reads them where they are
  ModuleImage image;
  std::vector<elf::Function> functions;
  FunctionCfg g;
  uint64_t spot = 0;
};

void module_of(Module& m, const std::string& before, const std::string& g_text, std::size_t gap_after,
               std::vector<elf::Function> more = {}) {
  auto f = test::assemble(before);
  auto g = test::assemble(g_text);
  ASSERT_TRUE(f && g);
  m = Module{};
  std::vector<uint8_t>& bytes = m.bytes;
  bytes = *f;
  bytes.resize(16, 0x90);
  bytes.insert(bytes.end(), g->begin(), g->end());
  const uint64_t g_end = kBase + bytes.size();
  bytes.resize(bytes.size() + gap_after, 0x90);
  const uint64_t h = kBase + bytes.size();
  bytes.push_back(0xc3);
  m.image.add(kBase, bytes, true);
  m.functions = {{kBase, f->size(), "f", false, 0}, {kBase + 16, g->size(), "g", false, 0}, {h, 1, "h", false, 0}};
  m.functions.insert(m.functions.end(), more.begin(), more.end());
  auto cfg = build_cfg(m.functions[1], m.image);
  EXPECT_TRUE(cfg) << cfg.error().message();
  if (cfg) m.g = std::move(*cfg);
  m.spot = short_jump_spot(m.g).value_or(0);
  EXPECT_EQ(g_end, m.g.end);
}

constexpr const char* kFramed = "push rbp\nmov rbp, rsp\ntest edi, edi\nje out\nmov eax, 1\nout:\npop rbp\nret";

TEST(EntryPads, EachFunctionsPadIsTheLastFiveBytesBeforeItElseTheFirstFiveAfterIt) {
  // f ends with ret: g's pad is the last 5 bytes of the padding before it.
  Module m;
  module_of(m, "xor eax, eax\nret", kFramed, 3);
  EntryPads pads(m.functions, m.image);
  ASSERT_EQ(m.spot, kBase + 17);
  auto pad = pads.pad_for(m.g, m.spot);
  ASSERT_TRUE(pad);
  EXPECT_EQ(pad->addr, kBase + 16 - kEntryPatchSize);
  EXPECT_EQ(pad->original, (std::array<uint8_t, 5>{0x90, 0x90, 0x90, 0x90, 0x90}));
  // f falls through into its padding (glibc's __memset_chk into memset):
  // that padding runs; g's pad is then the first 5 of the 10 after it.
  module_of(m, "cmp rdx, rcx\njb out\nout:", kFramed, 10);
  EntryPads fallthrough(m.functions, m.image);
  pad = fallthrough.pad_for(m.g, m.spot);
  ASSERT_TRUE(pad);
  EXPECT_EQ(pad->addr, m.g.end);
  // Padding of under 10 bytes after g is h's alone.
  module_of(m, "cmp rdx, rcx\njb out\nout:", kFramed, 9);
  EXPECT_FALSE(EntryPads(m.functions, m.image).pad_for(m.g, m.spot));
  // f ends with a call (noreturn, perhaps; perhaps not): not trusted.
  module_of(m, "call out\nout:", kFramed, 3);
  EXPECT_FALSE(EntryPads(m.functions, m.image).pad_for(m.g, m.spot));
}

TEST(EntryPads, PaddingWithASymbolInItOrOutOfReachGivesNoPad) {
  // A symbol of no size inside the padding before g: a label something may
  // reach, so not padding.
  Module m;
  module_of(m, "ret", kFramed, 3, {{kBase + 12, 0, "label", false, 0}});
  EXPECT_FALSE(EntryPads(m.functions, m.image).pad_for(m.g, m.spot));
  // rel8 counts from the short jump's end: a spot 120 bytes into g still
  // reaches the pad before it (-128); 121 would not.
  module_of(m, "ret", kFramed, 3);
  EntryPads pads(m.functions, m.image);
  const uint64_t pad = kBase + 16 - kEntryPatchSize;
  EXPECT_TRUE(pads.pad_for(m.g, pad + 128 - kShortJumpSize));
  EXPECT_FALSE(pads.pad_for(m.g, pad + 129 - kShortJumpSize));
}

TEST(EntryPads, AnEntryWithoutASpotForTheJmpGoesThroughItsPadChangingNoInstructionStart) {
  Module m;
  module_of(m, "ret", kFramed, 3);
  m.g.entry_pad = *EntryPads(m.functions, m.image).pad_for(m.g, m.spot);
  auto spot = entry_spot(m.g);
  ASSERT_TRUE(spot);
  EXPECT_TRUE(spot->probe_safe);
  EXPECT_EQ(spot->kept, 1u) << "push rbp runs in the original";
  EXPECT_EQ(spot->at, m.spot);
  EXPECT_EQ(spot->addr, m.spot + 1) << "after mov's REX prefix";
  auto patch = plan_patch(m.g, 0x500000, true);
  ASSERT_TRUE(patch) << patch.error().message();
  const EntryPatch& e = patch->entries[0];
  EXPECT_EQ(e.pad, m.g.entry_pad.addr);
  EXPECT_EQ(e.replacement[0], kJmpRel8Opcode);
  EXPECT_EQ(e.addr + 2 + static_cast<int8_t>(e.replacement[1]), e.pad) << "the short jump reaches the pad";
  EXPECT_TRUE(std::equal(e.original.begin() + 2, e.original.end(), e.replacement.begin() + 2)) << "3 bytes unchanged";
  EXPECT_EQ(e.pad_replacement[0], kJmpRel32Opcode);
  int32_t rel = 0;
  std::memcpy(&rel, e.pad_replacement.data() + 1, 4);
  EXPECT_EQ(e.pad + 5 + rel, 0x500000u) << "the pad jumps to the copy";
  EXPECT_FALSE(changes_an_instruction_start(m.g, e));
  // Without a pad: session 20's spot, at the second instruction.
  m.g.entry_pad = {};
  EXPECT_FALSE(entry_spot(m.g)->probe_safe);
  EXPECT_FALSE(plan_patch(m.g, 0x500000, true)) << "probe_safe_only refuses it";
}

}  // namespace
}  // namespace dyni::jit
