// Small functions assembled from text (LLVM MC) through the whole jit: block
// counts → layout → emitted cache → verifier → executed, with the expected
// layouts checked; edge inference, entry patches and the verifier's teeth.
#include <gtest/gtest.h>

#include <algorithm>
#include <sys/mman.h>

#include <cstring>
#include <map>

#include "jit/block_layout.h"
#include "jit/code_cache.h"
#include "jit/decoder.h"
#include "jit/edge_profile.h"
#include "jit/patch_plan.h"
#include "jit/verifier.h"
#include "tests/unit/assembler.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kArea = 1 << 16;

// An assembled function placed in executable memory at its "original" address,
// with a cache area right after it: both can be called.
class Assembled : public ::testing::Test {
 protected:
  void SetUp() override {
    area = static_cast<uint8_t*>(mmap(nullptr, 2 * kArea, PROT_READ | PROT_WRITE | PROT_EXEC,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area, MAP_FAILED);
  }
  void TearDown() override { munmap(area, 2 * kArea); }

  uint64_t original() const { return reinterpret_cast<uint64_t>(area); }
  uint64_t cache_base() const { return original() + kArea; }

  void load(const std::string& text) {
    auto bytes = test::assemble(text);
    ASSERT_TRUE(bytes) << bytes.error().message();
    code = *bytes;
    std::memcpy(area, code.data(), code.size());
    image = ModuleImage();
    image.add(original(), code, true);
    auto built = build_cfg(elf::Function{original(), code.size(), "f", false, 0}, image);
    ASSERT_TRUE(built) << built.error().message();
    cfg = std::move(*built);
  }

  std::size_t block_at(std::size_t offset) const {
    for (std::size_t i = 0; i < cfg.blocks.size(); ++i)
      if (cfg.blocks[i].start == original() + offset) return i;
    ADD_FAILURE() << "no block at +" << offset;
    return 0;
  }

  // Samples on every instruction of the blocks starting at these offsets.
  std::vector<BlockCount> counts(const std::map<std::size_t, uint64_t>& per_block) const {
    std::map<uint64_t, uint64_t> by_offset;
    for (auto [offset, n] : per_block) {
      const Block& b = cfg.blocks[block_at(offset)];
      for (std::size_t i = b.first; i < b.first + b.count; ++i) by_offset[cfg.instructions[i].addr - original()] = n;
    }
    return block_counts(cfg, by_offset);
  }

  CodeCache emit(const BlockLayout& layout) {
    auto cache = build_code_cache({{&cfg, layout}}, cache_base());
    EXPECT_TRUE(cache) << cache.error().message();
    if (!cache) return {};
    std::memcpy(area + kArea, cache->bytes.data(), cache->bytes.size());
    __builtin___clear_cache(reinterpret_cast<char*>(area), reinterpret_cast<char*>(area) + 2 * kArea);
    return std::move(*cache);
  }

  template <typename Fn>
  Fn at(uint64_t addr) const { return reinterpret_cast<Fn>(addr); }

  uint8_t* area = nullptr;
  std::vector<uint8_t> code;
  ModuleImage image;
  FunctionCfg cfg;
};

// Offsets below are those of the assembled bytes (noted beside each line).
const char* kTakenIsHot = R"(
  test edi, edi        # +0
  je hot               # +2
  mov eax, 1           # +4  cold
  ret                  # +9
hot:
  lea eax, [rdi + 2]   # +10
  ret
)";

TEST_F(Assembled, HotTakenBranchBecomesTheFallThrough) {
  load(kTakenIsHot);
  std::size_t entry = block_at(0), cold = block_at(4), hot = block_at(10);
  BlockLayout layout = layout_blocks(cfg, counts({{0, 50}, {10, 50}}));
  EXPECT_EQ(layout.order, (std::vector<std::size_t>{entry, hot, cold}));
  CodeCache cache = emit(layout);
  ASSERT_EQ(cache.functions.size(), 1u);
  const auto& tr = cache.functions[0].code.translation;
  ASSERT_GE(tr.size(), 2u);
  EXPECT_EQ(tr[1].kind, Translation::Inverted);  // je hot → jne cold, hot falls through
  EXPECT_EQ(tr[2].original_addr, original() + 10);
  auto copy = at<int (*)(int)>(cache_base());
  for (int x : {0, 1, -5, 77}) EXPECT_EQ(copy(x), at<int (*)(int)>(original())(x)) << x;
}

// A loop whose body sits after a cold error path and is entered at the check.
const char* kLoop = R"(
  xor eax, eax         # +0
  jmp check            # +2
err:
  mov eax, -1          # +4  cold
  ret                  # +9
body:
  add eax, esi         # +10
  cmp esi, 100000      # +12
  ja err               # +18
  dec esi              # +20
check:
  test esi, esi        # +22
  jne body             # +24
  ret                  # +26
)";

TEST_F(Assembled, LoopStaysCompactAndColdCodeGoesLast) {
  load(kLoop);
  std::size_t err = block_at(4), body = block_at(10), dec = block_at(20), check = block_at(22), exit = block_at(26);
  auto c = counts({{10, 400}, {20, 400}, {22, 400}});
  LayoutOptions copy_all;
  copy_all.cold = ColdBlocks::CopyLast;
  BlockLayout layout = layout_blocks(cfg, c, copy_all);
  ASSERT_EQ(layout.order.size(), cfg.blocks.size());
  EXPECT_EQ(layout.order.front(), 0u);
  // The unsampled error path and exit go last, in address order.
  EXPECT_EQ(std::vector(layout.order.end() - 2, layout.order.end()), (std::vector<std::size_t>{err, exit}));
  // The loop's three blocks are adjacent.
  std::vector<std::size_t> pos(cfg.blocks.size());
  for (std::size_t k = 0; k < layout.order.size(); ++k) pos[layout.order[k]] = k;
  std::size_t lo = std::min({pos[body], pos[dec], pos[check]}), hi = std::max({pos[body], pos[dec], pos[check]});
  EXPECT_EQ(hi - lo, 2u);
  auto sizes = relocated_block_sizes(cfg);
  auto edges = infer_edges(cfg, block_frequencies(cfg, c));
  // The original order was already good for this loop: the layout keeps its
  // score (but for the unsampled exit's tiny fall-through, moved last).
  EXPECT_GE(ext_tsp_score(sizes, edges, layout.order), 0.999 * ext_tsp_score(sizes, edges, original_layout(cfg).order));
  CodeCache cache = emit(layout);
  auto copy = at<int (*)(int, int)>(cache_base());
  for (int n : {0, 1, 2, 10, 1000, 200000}) EXPECT_EQ(copy(0, n), at<int (*)(int, int)>(original())(0, n)) << n;
}

TEST_F(Assembled, WellSampledFunctionsLeaveUnsampledBlocksInTheOriginal) {
  load(kLoop);
  std::size_t err = block_at(4), exit = block_at(26);
  LayoutOptions options;
  options.cold = ColdBlocks::LeaveInOriginal;
  BlockLayout layout = layout_blocks(cfg, counts({{10, 400}, {20, 400}, {22, 400}}), options);
  EXPECT_FALSE(layout.copied[err]);
  EXPECT_FALSE(layout.copied[exit]);
  EXPECT_EQ(layout.order.size(), cfg.blocks.size() - 2);
  CodeCache cache = emit(layout);
  // The copy's `ja err` goes to the original error path, which still works.
  auto copy = at<int (*)(int, int)>(cache_base());
  EXPECT_EQ(copy(0, 200000), -1);
  EXPECT_EQ(copy(0, 10), 55);
  // Too few samples to be sure (a 2-instruction block with no samples could
  // still run at 1.85 samples per instruction, the loop runs at 10): copied.
  BlockLayout sparse = layout_blocks(cfg, counts({{10, 10}, {20, 10}, {22, 10}}), options);
  EXPECT_TRUE(sparse.copied[err]);
  EXPECT_EQ(sparse.order.back(), exit) << "but still placed after the hot code";
  options.cold = ColdBlocks::CopyLast;
  EXPECT_TRUE(layout_blocks(cfg, counts({{10, 400}, {20, 400}, {22, 400}}), options).copied[err]);
}

TEST_F(Assembled, NoSamplesKeepsTheOriginalOrder) {
  load(kLoop);
  BlockLayout layout = layout_blocks(cfg, counts({}));
  EXPECT_EQ(layout.order, original_layout(cfg).order);
}

TEST_F(Assembled, EdgeInferenceConservesFlow) {
  load(kLoop);
  // A diamond inside the loop would be ideal; here: the loop's blocks carry
  // 400 each, and flow in equals flow out at each of them.
  auto c = counts({{0, 10}, {10, 400}, {20, 400}, {22, 400}, {26, 10}});
  auto f = block_frequencies(cfg, c);
  auto edges = infer_edges(cfg, f);
  for (std::size_t b : {block_at(10), block_at(20), block_at(22)}) {
    double in = 0, out = 0;
    for (const EdgeCount& e : edges) {
      if (e.to == b) in += e.weight;
      if (e.from == b) out += e.weight;
    }
    EXPECT_NEAR(in, f[b], 0.05 * f[b]) << b;
    EXPECT_NEAR(out, f[b], 0.05 * f[b]) << b;
  }
  // The unsampled error exit gets almost nothing; the back edge nearly all.
  for (const EdgeCount& e : edges) {
    if (e.to == block_at(4)) {
      EXPECT_LT(e.weight, 0.01 * f[block_at(10)]);
    }
    if (e.from == block_at(22) && e.to == block_at(10)) {
      EXPECT_GT(e.weight, 0.9 * f[block_at(22)]);
    }
  }
}

TEST_F(Assembled, EntryPatchIsAJumpToTheCopyAndKeepsTheOriginalBytes) {
  load(kTakenIsHot);
  auto patch = plan_patch(cfg, original() + 0x1000, false);
  ASSERT_TRUE(patch) << patch.error().message();
  ASSERT_EQ(patch->entries.size(), 1u);
  // After the kept test edi,edi (85 ff): 74 06 / b8 ..: je +6; the first 3 bytes of mov
  EXPECT_EQ(patch->entries[0].addr, original() + 2);
  EXPECT_EQ(patch->entries[0].original[0], 0x74);
  EXPECT_EQ(patch->entries[0].original[2], 0xb8);
  // e9 f9 0f 00 00: jmp rel32, 0x1000 - 7
  EXPECT_EQ(patch->entries[0].replacement, (std::array<uint8_t, 5>{0xe9, 0xf9, 0x0f, 0x00, 0x00}));
  auto safe = plan_patch(cfg, original() + 0x1000, true);
  ASSERT_FALSE(safe) << "the jmp would change je's opcode, where a uprobe can sit";
  EXPECT_EQ(reason_kind(safe.error().message()), "no instruction takes the jmp whole before a branch");
}

// The uprobe-safe entry (patch_plan.h): after the instructions that only
// fall through, the jmp goes after the REX prefix of the first instruction
// of 6 bytes or more, and no byte where an instruction begins changes. The
// patched original computes what it did.
TEST_F(Assembled, EntryPatchGoesAfterTheRexPrefixOfALongInstruction) {
  load(R"(
    push rbp                 # +0
    mov rbp, rsp             # +1: 48 89 e5, too short
    mov rax, [rdi + 0x100]   # +4: 48 8b 87 00 01 00 00
    add rax, rsi
    pop rbp
    ret
  )");
  auto spot = entry_spot(cfg);
  ASSERT_TRUE(spot) << spot.error().message();
  EXPECT_TRUE(spot->probe_safe);
  EXPECT_EQ(spot->kept, 2u);
  EXPECT_EQ(spot->at, original() + 4);
  EXPECT_EQ(spot->addr, original() + 5);
  auto cache = build_code_cache({{&cfg, original_layout(cfg)}}, cache_base());
  ASSERT_TRUE(cache) << cache.error().message();
  const CachedFunction& f = cache->functions[0];
  ASSERT_EQ(f.patch.entries.size(), 1u) << f.unpatched;
  const EntryPatch& patch = f.patch.entries[0];
  EXPECT_FALSE(changes_an_instruction_start(cfg, patch));
  EXPECT_EQ(patch.original, (std::array<uint8_t, 5>{0x8b, 0x87, 0x00, 0x01, 0x00}));
  const auto& t = f.code.translation;
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t[2].original_addr, original() + 4);
  EXPECT_EQ(original() + 5 + 5 + *reinterpret_cast<const int32_t*>(patch.replacement.data() + 1), t[2].new_addr)
      << "lands on the copy of the REX instruction, after those of push rbp and mov rbp, rsp";
  const std::vector<uint8_t> file = code;
  std::memcpy(area + (cache->base - original()), cache->bytes.data(), cache->bytes.size());
  std::memcpy(area + 5, patch.replacement.data(), kEntryPatchSize);
  EXPECT_EQ(area[4], 0x48) << "the REX prefix stays";
  uint64_t table[64] = {};
  table[32] = 1000;
  for (uint64_t add : {0u, 7u, 123456u})
    EXPECT_EQ(at<uint64_t (*)(const uint64_t*, uint64_t)>(original())(table, add), 1000 + add);
  std::memcpy(area, file.data(), file.size());
}

// An entry whose instructions before its first branch are all short keeps
// the session-20 spot (after its first instruction), unless only
// probe-safe entries are asked for: a uprobe at its second instruction
// would break the jmp there.
TEST_F(Assembled, EntryPatchAfterAFirstInstructionOnlyWhereNotProbeSafe) {
  load("push rbx\nmov eax, edi\nadd eax, 1\npop rbx\nret");
  auto spot = entry_spot(cfg);
  ASSERT_TRUE(spot) << spot.error().message();
  EXPECT_FALSE(spot->probe_safe);
  EXPECT_EQ(spot->kept, 1u);
  EXPECT_EQ(patch_address(cfg), original() + 1);
  CacheOptions probe_safe;
  probe_safe.probe_safe_entries = true;
  auto safe = build_code_cache({{&cfg, original_layout(cfg)}}, cache_base(), {}, probe_safe);
  ASSERT_TRUE(safe) << safe.error().message();
  ASSERT_EQ(safe->functions.size(), 1u) << "still copied, for the copies that call it";
  EXPECT_TRUE(safe->functions[0].patch.entries.empty());
  EXPECT_EQ(reason_kind(safe->functions[0].unpatched), "no instruction takes the jmp whole before a branch");
  auto cache = build_code_cache({{&cfg, original_layout(cfg)}}, cache_base());
  ASSERT_TRUE(cache) << cache.error().message();
  const CachedFunction& f = cache->functions[0];
  ASSERT_EQ(f.patch.entries.size(), 1u) << f.unpatched;
  EXPECT_TRUE(changes_an_instruction_start(cfg, f.patch.entries[0]));
  int32_t rel;
  std::memcpy(&rel, f.patch.entries[0].replacement.data() + 1, 4);
  EXPECT_EQ(original() + 1 + 5 + rel, f.code.base + 1) << "lands after the copy of push rbx";
  EXPECT_EQ(f.code.bytes[0], 0x53);
  load("call rax\nnop\nnop\nnop\nnop\nnop\nret");
  EXPECT_EQ(reason_kind(entry_spot(cfg).error().message()), "call in the entry bytes") << "a call first";
  load("mov eax, 1\nloop:\ndec edi\njne loop\nret");
  EXPECT_EQ(reason_kind(entry_spot(cfg).error().message()), "first instruction cannot be kept before the jmp")
      << "the second begins a loop";
  load("mov eax, edi\njmp out\nnop\nnop\nnop\nout:\nret");
  EXPECT_FALSE(entry_spot(cfg)->probe_safe) << "a jmp rel8 second";
  load("push rbx\nmov eax, edi\npop rbx\nret");
  EXPECT_EQ(reason_kind(entry_spot(cfg).error().message()), "too small to patch") << "no room after push rbx";
  EXPECT_EQ(patch_address(cfg), original());
}

// A jmp rel32 takes the patch at its own first byte, even the function's:
// the kernel emulates it under a uprobe, and writes its opcode, the jmp's
// own, back when the probe goes. A jmp rel8 does not (its opcode, written
// back, would cut the jmp short).
TEST_F(Assembled, EntryAtAJmpRel32ChangesOnlyItsDisplacement) {
  load(".byte 0xe9\n.long body - next\nnext:\nint3\nbody:\nmov eax, edi\nadd eax, 1\nadd eax, 2\nret");
  auto jumps = plan_patch(cfg, cache_base(), true);
  ASSERT_TRUE(jumps) << jumps.error().message();
  EXPECT_EQ(jumps->entries[0].addr, original());
  EXPECT_FALSE(changes_an_instruction_start(cfg, jumps->entries[0]));
  load("jmp body\nint3\nint3\nint3\nbody:\nmov eax, edi\nadd eax, 1\nadd eax, 2\nret");
  EXPECT_FALSE(entry_spot(cfg));
  EXPECT_FALSE(plan_patch(cfg, cache_base(), false));
}

// A kept first instruction followed by a jmp that the layout drops: the
// entry lands on the copy of the jmp's target, which follows the first
// instruction's copy, and the patched original computes what it did.
TEST_F(Assembled, EntryPatchAfterAKeptInstructionLandsWhereADroppedJmpWent) {
  load(R"(
    mov eax, edi          # +0
    .byte 0xe9            # +2: jmp check, rel32
    .long check - body
  body:                   # +7
    add eax, 3
    dec esi
  check:
    test esi, esi
    jne body
    ret
  )");
  ASSERT_TRUE(entry_spot(cfg)->probe_safe) << "in the jmp rel32, after the kept mov";
  const std::vector<uint8_t> file = code;
  const std::size_t body = block_at(7), check = block_at(12), exit = block_at(16);
  for (unsigned alignment : {0u, 32u}) {  // 32: check is a loop top, after nop padding
    SCOPED_TRACE(alignment);
    BlockLayout layout;
    layout.order = {0, check, exit, body};
    layout.copied.assign(cfg.blocks.size(), true);
    layout.loop_top.assign(cfg.blocks.size(), false);
    layout.loop_top[check] = alignment > 0;
    layout.loop_alignment = alignment;
    auto cache = build_code_cache({{&cfg, layout}}, cache_base());
    ASSERT_TRUE(cache) << cache.error().message();
    const CachedFunction& f = cache->functions[0];
    ASSERT_EQ(f.patch.entries.size(), 1u) << f.unpatched;
    EXPECT_EQ(f.patch.entries[0].addr, original() + 2);
    const auto& t = f.code.translation;
    ASSERT_GE(t.size(), 2u);
    EXPECT_EQ(t[1].original_addr, original() + 12) << "the jmp is dropped: check follows";
    EXPECT_EQ(t[1].kind, alignment ? Translation::Padding : Translation::Copied);
    int32_t rel;
    std::memcpy(&rel, f.patch.entries[0].replacement.data() + 1, 4);
    EXPECT_EQ(original() + 2 + 5 + rel, t[1].new_addr);
    std::memcpy(area + (cache->base - original()), cache->bytes.data(), cache->bytes.size());
    auto want = [](int x, int n) { return x + 3 * n; };
    std::memcpy(area + 2, f.patch.entries[0].replacement.data(), kEntryPatchSize);
    for (int n : {0, 1, 5, 1000}) EXPECT_EQ(at<int (*)(int, int)>(original())(7, n), want(7, n)) << n;
    std::memcpy(area, file.data(), file.size());
  }
}

TEST_F(Assembled, EntryPatchKeepsEndbr64) {
  load("endbr64\npush rbx\nmov eax, edi\npop rbx\nret");
  auto patch = plan_patch(cfg, original() + 0x1000, false);
  ASSERT_TRUE(patch) << patch.error().message();
  EXPECT_EQ(patch->entries[0].addr, original() + 4);
  // 53 / 89 f8 / 5b / c3: push rbx; mov eax, edi; pop rbx (the bytes after endbr64)
  EXPECT_EQ(patch->entries[0].original, (std::array<uint8_t, 5>{0x53, 0x89, 0xf8, 0x5b, 0xc3}));
  // jmp rel32 from +4: 0x1000 - 9 = 0xff7
  EXPECT_EQ(patch->entries[0].replacement, (std::array<uint8_t, 5>{0xe9, 0xf7, 0x0f, 0x00, 0x00}));
}

TEST_F(Assembled, AnotherEntryPointInTheEntryBytesLeavesTheEntryUnpatched) {
  load(kTakenIsHot);
  auto cache = build_code_cache({{&cfg, original_layout(cfg), true}}, cache_base());
  ASSERT_TRUE(cache) << cache.error().message();
  EXPECT_TRUE(cache->functions[0].patch.entries.empty());
  EXPECT_EQ(reason_kind(cache->functions[0].unpatched), "another entry point in the entry bytes");
}

TEST_F(Assembled, EntryPatchRefusals) {
  load("xor eax, eax\nret");
  EXPECT_EQ(reason_kind(plan_patch(cfg, cache_base(), false).error().message()), "too small to patch");
  load("push rbx\nnop\nloop:\ndec edi\njne loop\npop rbx\nret");
  EXPECT_EQ(reason_kind(plan_patch(cfg, cache_base(), false).error().message()), "branch target in the entry bytes");
  load("nop\ncall rax\nnop\nnop\nnop\nret");
  EXPECT_EQ(reason_kind(plan_patch(cfg, cache_base(), false).error().message()), "call in the entry bytes");
}

TEST_F(Assembled, VerifierCatchesBrokenBridges) {
  load(kLoop);
  // The shuffle is seeded with the function's address too (random here):
  // take the first seed whose layout needs an added jmp.
  Result<EmittedCode> code = fail("no layout");
  for (uint64_t seed = 1; seed < 200; ++seed) {
    code = emit_function(cfg, shuffled_layout(cfg, seed, false), cache_base());
    ASSERT_TRUE(code) << code.error().message();
    if (std::any_of(code->translation.begin(), code->translation.end(),
                    [](const TranslationEntry& t) { return t.kind == Translation::Jump; }))
      break;
  }
  ASSERT_TRUE(verify(cfg, *code));
  bool tried_jump = false;
  for (std::size_t k = 0; k < code->translation.size(); ++k) {
    const TranslationEntry& t = code->translation[k];
    if (t.kind != Translation::Jump) continue;
    auto bad = *code;
    bad.bytes[t.new_addr - bad.base + 1] ^= 0x10;  // the added jmp now lands elsewhere
    EXPECT_FALSE(verify(cfg, bad));
    tried_jump = true;
  }
  EXPECT_TRUE(tried_jump) << "the shuffled layout should need an added jmp";
  auto reordered = *code;  // claim a different instruction order
  std::swap(reordered.translation[1].original_addr, reordered.translation[2].original_addr);
  EXPECT_FALSE(verify(cfg, reordered));
  auto missing = *code;  // lose an instruction that is not a jmp
  missing.translation.erase(missing.translation.begin() + 1);
  EXPECT_FALSE(verify(cfg, missing));
}

TEST(Assembler, ReportsErrors) {
  EXPECT_FALSE(test::assemble("not_an_instruction eax"));
  EXPECT_FALSE(test::assemble("call external_function"));  // needs a relocation
}

}  // namespace
}  // namespace dyni::jit

namespace dyni::jit {
namespace {

// A call through a PLT-style stub (jmp [rip+slot]) to a known function goes
// straight to that function — or to its copy when it is in the cache too.
TEST_F(Assembled, CallsThroughPltStubsBypassTheStub) {
  auto a = test::assemble_with_labels(R"(
f:
  push rbx
  call stub
  pop rbx
  ret
g:
  lea eax, [rdi + 5]
  ret
stub:
  jmp qword ptr [rip + slot]
  .p2align 3
slot:
  .quad 0
end:
)");
  ASSERT_TRUE(a) << a.error().message();
  std::memcpy(area, a->bytes.data(), a->bytes.size());
  uint64_t f = original() + a->labels.at("f"), g = original() + a->labels.at("g");
  uint64_t stub = original() + a->labels.at("stub");
  std::memcpy(area + a->labels.at("slot"), &g, 8);  // what the dynamic linker would have written
  image = ModuleImage();
  image.add(original(), a->bytes, true);
  auto fcfg = build_cfg(elf::Function{f, g - f, "f", false, 0}, image);
  auto gcfg = build_cfg(elf::Function{g, stub - g, "g", false, 0}, image);
  ASSERT_TRUE(fcfg && gcfg);
  Redirects plt;
  plt.to[stub] = g;
  for (bool g_in_cache : {false, true}) {
    std::vector<HotCode> hot = {{&*fcfg, original_layout(*fcfg)}};
    if (g_in_cache) hot.push_back({&*gcfg, original_layout(*gcfg)});
    auto cache = build_code_cache(hot, cache_base(), plt);
    ASSERT_TRUE(cache) << cache.error().message();
    uint64_t want = g_in_cache ? cache->functions[1].code.base : g;
    EXPECT_EQ(cache->redirects(stub), want);
    // The copy's call (its second instruction) targets g or g's copy, not the stub.
    const auto& tr = cache->functions[0].code.translation;
    auto call = decode_one(std::span(cache->bytes).subspan(tr[1].new_addr - cache_base()), tr[1].new_addr);
    ASSERT_TRUE(call);
    EXPECT_EQ(call->target, want);
    std::memcpy(area + kArea, cache->bytes.data(), cache->bytes.size());
    __builtin___clear_cache(reinterpret_cast<char*>(area), reinterpret_cast<char*>(area) + 2 * kArea);
    for (int x : {0, 7, -9}) EXPECT_EQ(at<int (*)(int)>(cache_base())(x), x + 5);
  }
  // Out of reach (±2 GB): the stub stays.
  Redirects far;
  far.to[stub] = g + (8ull << 30);
  auto cache = build_code_cache({{&*fcfg, original_layout(*fcfg)}}, cache_base(), far);
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->redirects(stub), stub);
}

}  // namespace
}  // namespace dyni::jit
