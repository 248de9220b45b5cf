// How copies leave: regressions of issue 10, each executed, and the
// verifier's checks, each with a mutation it must catch. A last jcc or call
// falls past the function's end; no exit may land in bytes an entry patch
// overwrites; xbegin is not a jcc; one bad function never fails the cache.
#include <gtest/gtest.h>

#include "jit/decoder.h"
#include "jit/emitter.h"
#include "jit/entry_branches.h"
#include "jit/patch_plan.h"
#include "jit/pipeline.h"
#include "jit/relocator.h"
#include "jit/verifier.h"
#include "tests/unit/asm_module.h"
#include "tests/unit/this_binary.h"

namespace dyni::jit {
namespace {

using test::AsmModule;
using test::Outcome;

const test::Inputs kInputs = {{0, 0}, {1, 0}, {2, 5}, {3, -1}, {-7, 2}, {100, 3}, {101, 4}, {-1, -1}, {12345, 6}};

BlockLayout in_order(const FunctionCfg& cfg) { return original_layout(cfg); }

// Every block in address order except the one starting at `addr`.
BlockLayout leaving_behind(const FunctionCfg& cfg, uint64_t addr) {
  BlockLayout l = original_layout(cfg);
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b)
    if (cfg.blocks[b].start == addr) l.copied[b] = false;
  std::erase_if(l.order, [&](std::size_t b) { return !l.copied[b]; });
  return l;
}

// `name` run from its copy and from its patched entry computes what the
// original computed, for every input, and neither hangs nor crashes.
void expect_same_as_original(AsmModule& m, const std::vector<std::string>& hot, const std::string& name,
                             const std::function<BlockLayout(const FunctionCfg&)>& layout_of) {
  m.unpatch();
  test::Run want = test::run_isolated(m.addr(name), kInputs);
  ASSERT_EQ(want.outcome, Outcome::Returned) << "the original " << describe(want);
  CodeCache cache = m.build(hot, layout_of);
  ASSERT_TRUE(cache.rejected.empty()) << cache.rejected[0].reason;
  uint64_t copy = AsmModule::copy_of(cache, m.addr(name));
  ASSERT_NE(copy, 0u);
  for (auto [how, fn] : {std::pair{"copy", copy}, std::pair{"patched entry", m.addr(name)}}) {
    test::Run got = test::run_isolated(fn, kInputs);
    EXPECT_EQ(got.outcome, Outcome::Returned) << name << " through its " << how << " " << describe(got);
    EXPECT_EQ(got.results, want.results) << name << " through its " << how;
  }
}

// f ends in a jcc: when it is not taken, f falls into g.
const char* kLastJcc = R"(
f:
  lea rax, [rdi + 3]
  test dil, 1
  jne h
g:
  lea rax, [rdi + 100]
  ret
h:
  add rax, rax
  ret
end:
)";

// f ends in a call: when h returns, f goes on into g.
const char* kLastCall = R"(
f:
  lea rax, [rdi + 1]
  call h
g:
  add rax, 7
  ret
h:
  imul rax, rax, 3
  ret
end:
)";

TEST(CopyExits, ALastJccContinuesAtTheOriginalFallThrough) {
  auto m = AsmModule::load(kLastJcc, {"f", "g", "h"});
  ASSERT_TRUE(m);
  expect_same_as_original(*m, {"f"}, "f", in_order);       // nothing follows f's copy
  expect_same_as_original(*m, {"f", "h"}, "f", in_order);  // h's copy follows it
}

TEST(CopyExits, ALastCallContinuesAtTheOriginalFallThrough) {
  auto m = AsmModule::load(kLastCall, {"f", "g", "h"});
  ASSERT_TRUE(m);
  expect_same_as_original(*m, {"f"}, "f", in_order);
  expect_same_as_original(*m, {"f", "h"}, "f", in_order);
  expect_same_as_original(*m, {"f", "g", "h"}, "f", in_order);  // g's copy is reached through the exit
}

TEST(CopyExits, VerifierCatchesACopyThatCanRunPastItsEnd) {
  for (const char* text : {kLastJcc, kLastCall}) {
    auto m = AsmModule::load(text, {"f", "g", "h"});
    ASSERT_TRUE(m);
    const FunctionCfg& f = m->cfg("f");
    auto code = emit_function(f, original_layout(f), m->cache_base());
    ASSERT_TRUE(code) << code.error().message();
    ASSERT_TRUE(verify(f, *code));
    ASSERT_EQ(code->translation.back().kind, Translation::Jump);
    EXPECT_EQ(code->translation.back().original_addr, f.end);
    auto cut = *code;  // the copy as it was emitted before: no exit after the last instruction
    cut.translation.pop_back();
    cut.bytes.resize(cut.bytes.size() - 5);
    cut.code_size -= 5;
    auto checked = verify(f, cut);
    ASSERT_FALSE(checked);
    EXPECT_NE(checked.error().message().find("can run past the end of the copy"), std::string::npos)
        << checked.error().message();
  }
}

// The block at f+4, the loop head, lies under the entry patch (after endbr64).
const char* kLoopUnderThePatch = R"(
f:
  endbr64
loop:
  shr rdi
  jne loop
  lea rax, [rdi + rsi + 7]
  ret
end:
)";

TEST(CopyExits, BlocksUnderTheEntryPatchAreCopied) {
  auto m = AsmModule::load(kLoopUnderThePatch, {"f"});
  ASSERT_TRUE(m);
  uint64_t loop = m->addr("f") + 4;
  auto leave_loop = [&](const FunctionCfg& cfg) { return leaving_behind(cfg, loop); };
  expect_same_as_original(*m, {"f"}, "f", leave_loop);
  BlockLayout completed = with_entry_bytes_copied(m->cfg("f"), leave_loop(m->cfg("f")));
  EXPECT_TRUE(completed.copied[1]);
}

TEST(CopyExits, VerifierCatchesAnExitIntoPatchedBytes) {
  auto m = AsmModule::load(kLoopUnderThePatch, {"f"});
  ASSERT_TRUE(m);
  const FunctionCfg& f = m->cfg("f");
  uint64_t entry = patch_address(f);
  ASSERT_EQ(entry, f.start + 4);
  // Emitted without the completion build_code_cache makes: the loop block stays behind.
  auto code = emit_function(f, leaving_behind(f, entry), m->cache_base());
  ASSERT_TRUE(code) << code.error().message();
  EXPECT_TRUE(verify(f, *code)) << "unpatched, going back to the original loop is fine";
  auto checked = verify(f, *code, {}, {{entry, entry + kEntryPatchSize}});
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message().find("lands in patched bytes"), std::string::npos) << checked.error().message();
  auto whole = emit_function(f, original_layout(f), m->cache_base());
  ASSERT_TRUE(whole);
  EXPECT_TRUE(verify(f, *whole, {}, {{entry, entry + kEntryPatchSize}}));
}

// a jumps 3 bytes into b (as mempcpy jumps into memcpy): b's entry patch
// would be run from its middle.
const char* kJumpIntoAnotherEntry = R"(
a:
  lea rax, [rdi + 1]
  jmp b_inner
b:
  mov rax, rdi
b_inner:
  add rax, 5
  ret
end:
)";

TEST(CopyExits, VerifierCatchesAnExitIntoAnotherFunctionsPatchedBytes) {
  auto m = AsmModule::load(kJumpIntoAnotherEntry, {"a", "b"});
  ASSERT_TRUE(m);
  const FunctionCfg& a = m->cfg("a");
  uint64_t b = m->addr("b");
  auto code = emit_function(a, original_layout(a), m->cache_base());
  ASSERT_TRUE(code);
  EXPECT_TRUE(verify(a, *code, {}, {}));
  EXPECT_TRUE(verify(a, *code, {}, {{b + 3 - kEntryPatchSize, b + 3}})) << "ends right before the target";
  auto checked = verify(a, *code, {}, {{b, b + kEntryPatchSize}});
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message().find("lands in patched bytes"), std::string::npos) << checked.error().message();
}

// A copied jmp through a jump table lands where the original table says: an
// entry into another function's entry bytes is an exit into patched bytes.
TEST(CopyExits, VerifierCatchesAJumpTableEntryIntoPatchedBytes) {
  auto m = AsmModule::load(R"(
a:
  cmp rdi, 1
  ja a_default
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
a_default:
  xor eax, eax
  ret
b:
  mov rax, rdi
b_inner:
  add rax, 5
  ret
end:
  .p2align 2
table:
  .long a_default - table
  .long b_inner - table
)", {"a", "b"});
  ASSERT_TRUE(m);
  const FunctionCfg& a = m->cfg("a");
  ASSERT_EQ(a.tables.size(), 1u);
  uint64_t b = m->addr("b");
  auto code = emit_function(a, original_layout(a), m->cache_base());
  ASSERT_TRUE(code);
  EXPECT_TRUE(verify(a, *code));
  auto checked = verify(a, *code, {}, {{b, b + kEntryPatchSize}});
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message().find("lands in patched bytes"), std::string::npos) << checked.error().message();
}

// One function failing the verifier leaves the others in the cache: here a,
// whose exit lands in b's patch (after b's kept first instruction), is
// rejected with the verifier's reason.
TEST(CopyExits, ACopyTheVerifierRejectsLeavesTheRestInTheCache) {
  auto m = AsmModule::load(R"(
a:
  lea rax, [rdi + 1]
  jmp b_inner
b:
  mov rax, rdi
  nop
  nop
b_inner:
  add rax, 5
  ret
end:
)", {"a", "b"});
  ASSERT_TRUE(m);
  std::vector<HotCode> hot = {{&m->cfg("a"), original_layout(m->cfg("a"))}, {&m->cfg("b"), original_layout(m->cfg("b"))}};
  auto cache = build_code_cache(hot, m->cache_base());
  ASSERT_TRUE(cache) << cache.error().message();
  ASSERT_EQ(cache->functions.size(), 1u);
  EXPECT_EQ(cache->functions[0].original_entry, m->addr("b"));
  EXPECT_EQ(cache->functions[0].code.base, m->cache_base()) << "packed again without a";
  ASSERT_EQ(cache->rejected.size(), 1u);
  EXPECT_EQ(cache->rejected[0].function, m->addr("a"));
  EXPECT_EQ(reason_kind(cache->rejected[0].reason), "copy fails verification") << cache->rejected[0].reason;
  EXPECT_FALSE(cache->redirects.to.count(m->addr("a")));
}

// f's copy cannot be emitted (its RIP-relative load would be 8 GB away); g,
// which calls f, stays in the cache and calls the original f.
TEST(CopyExits, ACopyThatCannotBeEmittedLeavesTheRestInTheCache) {
  auto m = AsmModule::load(R"(
f:
  mov rax, qword ptr [rip + data]
  ret
g:
  lea rax, [rdi + 1]
  ret
end:
data:
  .quad 42
)", {"f", "g"});
  ASSERT_TRUE(m);
  std::vector<HotCode> hot = {{&m->cfg("f"), original_layout(m->cfg("f"))}, {&m->cfg("g"), original_layout(m->cfg("g"))}};
  auto cache = build_code_cache(hot, m->cache_base() + (8ull << 30));
  ASSERT_TRUE(cache) << cache.error().message();
  ASSERT_EQ(cache->functions.size(), 1u);
  EXPECT_EQ(cache->functions[0].original_entry, m->addr("g"));
  ASSERT_EQ(cache->rejected.size(), 1u);
  EXPECT_EQ(reason_kind(cache->rejected[0].reason), "copy cannot be emitted") << cache->rejected[0].reason;
}

// xbegin's abort block next in the layout: xbegin keeps its sense (it has no
// opposite) and a jmp goes to its fall-through.
TEST(CopyExits, XbeginIsNeverInverted) {
  auto m = AsmModule::load(R"(
f:
  xbegin abort
  lea rax, [rdi + 1]
  xend
  ret
abort:
  lea rax, [rdi + 2]
  ret
end:
)", {"f"});
  ASSERT_TRUE(m);
  const FunctionCfg& f = m->cfg("f");
  ASSERT_EQ(f.blocks.size(), 3u) << "xend ends no block";
  auto abort_next = [](const FunctionCfg& cfg) {
    BlockLayout l = original_layout(cfg);
    l.order = {0, 2, 1};
    return l;
  };
  CodeCache cache = m->build({"f"}, abort_next);
  ASSERT_EQ(cache.functions.size(), 1u) << (cache.rejected.empty() ? "" : cache.rejected[0].reason);
  const EmittedCode& code = cache.functions[0].code;
  EXPECT_EQ(code.translation[0].kind, Translation::Copied);
  auto xbegin = decode_one(code.bytes, code.base);
  ASSERT_TRUE(xbegin);
  EXPECT_EQ(xbegin->mnemonic, ZYDIS_MNEMONIC_XBEGIN);
  EXPECT_EQ(code.translation[1].kind, Translation::Jump);
  EXPECT_TRUE(verify(f, code));
  auto claimed_inverted = code;  // mutation: an xbegin passed off as an inverted branch
  claimed_inverted.translation[0].kind = Translation::Inverted;
  EXPECT_FALSE(verify(f, claimed_inverted));
  if (__builtin_cpu_supports("rtm")) expect_same_as_original(*m, {"f"}, "f", abort_next);
}

TEST(CopyExits, OnlyAJccIsInvertedAndOnlyAtItsOpcode) {
  // c7 f8 0f 85 00 00: xbegin whose rel32 holds the bytes of a jne opcode
  auto xbegin = decode_one(std::vector<uint8_t>{0xc7, 0xf8, 0x0f, 0x85, 0x00, 0x00}, 0x1000);
  ASSERT_TRUE(xbegin);
  EXPECT_FALSE(jcc_condition(*xbegin));
  EXPECT_FALSE(relocate_inverted(*xbegin, 0x2000, 0x3000));
  // 3e 0f 84 00 00 00 00: je (ds hint) → 3e 0f 85 rel32, 0x3000 - 0x2007
  auto je = decode_one(std::vector<uint8_t>{0x3e, 0x0f, 0x84, 0, 0, 0, 0}, 0x1000);
  ASSERT_TRUE(je);
  EXPECT_EQ(jcc_condition(*je), 4u);
  EXPECT_EQ(*relocate_inverted(*je, 0x2000, 0x3000), (std::vector<uint8_t>{0x3e, 0x0f, 0x85, 0xf9, 0x0f, 0, 0}));
  // 72 10: jb → 0f 83 rel32 (jae), 0x3000 - 0x2006
  auto jb = decode_one(std::vector<uint8_t>{0x72, 0x10}, 0x1000);
  ASSERT_TRUE(jb);
  EXPECT_EQ(*relocate_inverted(*jb, 0x2000, 0x3000), (std::vector<uint8_t>{0x0f, 0x83, 0xfa, 0x0f, 0, 0}));
  auto loop = decode_one(std::vector<uint8_t>{0xe2, 0xfe}, 0x1000);  // loop: no opposite
  ASSERT_TRUE(loop);
  EXPECT_FALSE(jcc_condition(*loop));
}

// In this binary, jit_entry_jumper (not hot) jumps 5 bytes into
// jit_entry_jumped: the hot jit_entry_jumped is copied but not patched.
class EntryBranches : public ThisBinary {};

TEST_F(EntryBranches, AnEntryAnotherFunctionJumpsIntoIsNotPatched) {
  uint64_t jumped = named("jit_entry_jumped")->addr, fib = named("jit_fib")->addr;
  auto fib_cfg = build_cfg(*named("jit_fib"), *image);
  auto jumped_cfg = build_cfg(*named("jit_entry_jumped"), *image);
  ASSERT_TRUE(fib_cfg && jumped_cfg);
  ASSERT_EQ(patch_address(*jumped_cfg), jumped + 3) << "its first instruction is kept";
  auto span = [](const FunctionCfg& cfg) { return std::make_pair(entry_spot(cfg)->at, entry_spot(cfg)->addr + kEntryPatchSize); };
  std::set<uint64_t> hit = entries_branched_into(*table, *image, {span(*jumped_cfg), span(*fib_cfg)});
  EXPECT_EQ(hit, (std::set<uint64_t>{jumped + 3}));
  ModuleInput input{table.get(), image.get(), nullptr, {jumped, fib}, provisional_cache_base(*table), {}, {}, 0};
  use_unwind_info(input, *file);
  auto plan = optimize_module(input);
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->cache.functions.size(), 2u);
  for (const CachedFunction& f : plan->cache.functions) {
    if (f.original_entry == jumped) {
      EXPECT_TRUE(f.patch.entries.empty());
      EXPECT_EQ(reason_kind(f.unpatched), "another entry point in the entry bytes") << f.unpatched;
    } else {
      EXPECT_EQ(f.patch.entries.size(), 1u) << f.unpatched;
    }
  }
}

// EntryPolicy::WhenTheCopyDiffers: g, a leaf copied in its original order,
// runs what its original runs and keeps its entry; f (calls g's copy) and h
// (blocks moved) get theirs patched. Under All every one is patched.
TEST(EntryPolicy, OnlyCopiesThatDifferFromTheirOriginalArePatched) {
  auto m = AsmModule::load(R"(
f:
  sub rsp, 8
  mov rax, rdi
  call g
  add rsp, 8
  ret
g:
  lea rax, [rdi + 1]
  add rax, 0
  ret
h:
  test rdi, rdi
  je h_zero
  mov eax, 1
  ret
h_zero:
  xor eax, eax
  ret
end:
)", {"f", "g", "h"});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->cfg("h").blocks.size(), 3u);
  std::vector<HotCode> hot = {{&m->cfg("f"), original_layout(m->cfg("f"))},
                              {&m->cfg("g"), original_layout(m->cfg("g"))},
                              {&m->cfg("h"), BlockLayout{{0, 2, 1}, {true, true, true}, {}, 0}}};
  CacheOptions when_differs;
  when_differs.entries = EntryPolicy::WhenTheCopyDiffers;
  auto differs = build_code_cache(hot, m->cache_base(), {}, when_differs);
  auto all = build_code_cache(hot, m->cache_base(), {}, CacheOptions{});
  ASSERT_TRUE(differs && all);
  ASSERT_EQ(differs->functions.size(), 3u);
  EXPECT_FALSE(differs->functions[0].patch.entries.empty()) << "f calls g's copy: " << differs->functions[0].unpatched;
  EXPECT_TRUE(differs->functions[1].patch.entries.empty());
  EXPECT_EQ(reason_kind(differs->functions[1].unpatched), "the copy runs what the original runs");
  EXPECT_FALSE(differs->functions[2].patch.entries.empty()) << "h's blocks moved: " << differs->functions[2].unpatched;
  for (const CachedFunction& f : all->functions) EXPECT_FALSE(f.patch.entries.empty()) << f.unpatched;
  // f's copy still calls g's copy directly.
  EXPECT_EQ(differs->redirects(m->addr("g")), AsmModule::copy_of(*differs, m->addr("g")));
}

}  // namespace
}  // namespace dyni::jit
