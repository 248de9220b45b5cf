// CFG analysis on small assembled functions (LLVM MC): jump-table bounds the
// compilers emit, tail calls through pointers, and what stays rejected.
// Each text ends its function at the label `end`; data after it is module
// data the function may read (its jump tables).
#include <gtest/gtest.h>

#include "jit/cfg.h"
#include "jit/module_image.h"
#include "tests/unit/assembler.h"

namespace dyni::jit {
namespace {

constexpr uint64_t kBase = 0x401000;

struct Analysed {
  test::Assembly assembly;
  ModuleImage image;
  Result<FunctionCfg> cfg = fail("not analysed");
  uint64_t at(const std::string& label) const { return kBase + assembly.labels.at(label); }
};

std::unique_ptr<Analysed> analyse(const std::string& text) {
  auto out = std::make_unique<Analysed>();
  auto a = test::assemble_with_labels(text);
  EXPECT_TRUE(a) << a.error().message();
  if (!a) return out;
  out->assembly = std::move(*a);
  out->image.add(kBase, out->assembly.bytes, true);
  uint64_t size = out->assembly.labels.at("end");
  out->cfg = build_cfg(elf::Function{kBase, size, "f", false, 0}, out->image);
  return out;
}

std::string kind_of(const Analysed& a) { return a.cfg ? "accepted" : reason_kind(a.cfg.error().message()); }

const char* kTableTail = R"(
c0: mov eax, 1
  ret
c1: mov eax, 2
  ret
c2: mov eax, 3
  ret
def: xor eax, eax
  ret
end:
  .p2align 2
table:
  .long c0 - table
  .long c1 - table
  .long c2 - table
)";

TEST(CfgAsm, TableBoundedByACompareOfTheSameMemory) {
  auto a = analyse(std::string(R"(
  cmp dword ptr [rdi + 0x234], 2
  ja def
  mov eax, dword ptr [rdi + 0x234]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 1u);
  EXPECT_EQ(a->cfg->tables[0].targets, (std::vector<uint64_t>{a->at("c0"), a->at("c1"), a->at("c2")}));
}

TEST(CfgAsm, AStoreBetweenCompareAndLoadLosesTheBound) {
  auto a = analyse(std::string(R"(
  cmp dword ptr [rdi + 0x234], 2
  ja def
  mov dword ptr [rsi], 7
  mov eax, dword ptr [rdi + 0x234]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  EXPECT_EQ(kind_of(*a), "jump table without a provable bound");
}

TEST(CfgAsm, TableBoundedThroughARegisterCopiedBeforeTheCompare) {
  auto a = analyse(std::string(R"(
  mov r12, rdi
  cmp rdi, 2
  ja def
  lea rdx, [rip + table]
  mov rdi, rcx
  movsxd rax, dword ptr [rdx + r12*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_EQ(a->cfg->tables.at(0).targets.size(), 3u);
}

TEST(CfgAsm, CompareOfAnOverwrittenRegisterIsNoBound) {
  auto a = analyse(std::string(R"(
  cmp rdi, 2
  ja def
  mov rdi, rcx
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  EXPECT_EQ(kind_of(*a), "jump table without a provable bound");
}

// Tables the copy may read a rebuilt version of (cfg.h: rebuildable): the
// base is the table's on every path to the load, the guard no path avoids.
bool rebuildable(const std::string& dispatch) {
  auto a = analyse(dispatch + kTableTail);
  EXPECT_TRUE(a->cfg) << a->cfg.error().message();
  return a->cfg && a->cfg->tables.size() == 1 && a->cfg->tables[0].rebuildable;
}

TEST(CfgAsm, TheUsualGuardedTableIsRebuildable) {
  EXPECT_TRUE(rebuildable(R"(
  cmp edi, 2
  ja def
  mov eax, edi
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)")) << "32-bit compare, then a 32-bit copy (zero-extends)";
  EXPECT_TRUE(rebuildable(R"(
  cmp rdi, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)")) << "64-bit compare";
  EXPECT_TRUE(rebuildable(R"(
  mov ecx, dword ptr [rsi]
  test rdx, rdx
  je def
  cmp ecx, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rcx*4]
  add rax, rdx
  jmp rax
)")) << "32-bit compare of a register last written with 32 bits, in the block that is the only way in";
}

TEST(CfgAsm, TablesWhoseIndexOrBaseIsNotProvenAreNotRebuilt) {
  EXPECT_FALSE(rebuildable(R"(
  cmp edi, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)")) << "bits 32-63 of rdi were never compared";
  EXPECT_FALSE(rebuildable(R"(
  cmp rdi, 2
  ja def
  lea rdx, [rip + table]
  mov rdx, rcx
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)")) << "the base is redefined after the lea";
  EXPECT_FALSE(rebuildable(R"(
  cmp rdi, 2
  ja def
disp:
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
  mov rdi, rcx
  jmp disp
)")) << "a second way into the dispatch, around the guard";
  EXPECT_FALSE(rebuildable(R"(
  mov ecx, dword ptr [rsi]
  test rdx, rdx
  je skip
  mov rcx, qword ptr [rsi]
skip:
  cmp ecx, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rcx*4]
  add rax, rdx
  jmp rax
)")) << "on one way in, rcx was last written with 64 bits";
  EXPECT_FALSE(rebuildable(R"(
  cmp rdi, 2
  ja def
  lea rdx, [rip + table]
  imul rdi
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)")) << "mul writes rdx, the base, without naming it";
  EXPECT_FALSE(rebuildable(R"(
  cmp rdi, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  int 0x80
  add rax, rdx
  jmp rax
)")) << "the kernel returns in rax, the loaded entry, at int 0x80";
}

TEST(CfgAsm, TableEntriesInOtherCodeAreExits) {
  auto a = analyse(R"(
  cmp edi, 1
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
c0: mov eax, 1
  ret
def: xor eax, eax
  ret
end:
cold: mov eax, 9
  ret
  .p2align 2
table:
  .long c0 - table
  .long cold - table
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  const Block* dispatch = a->cfg->block_at(a->at("c0") - 2);
  ASSERT_NE(dispatch, nullptr);
  EXPECT_TRUE(dispatch->exits);
  EXPECT_EQ(dispatch->successors, (std::vector<uint64_t>{a->at("c0")}));
}

TEST(CfgAsm, TailCallsThroughPointersLeaveTheFunction) {
  auto a = analyse("push rbx\nmov rax, qword ptr [rdi + 0x358]\npop rbx\njmp rax\nend:");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_TRUE(a->cfg->blocks.back().exits);
  auto b = analyse("jmp qword ptr [rdi + 8]\nend:");
  EXPECT_EQ(kind_of(*b), "accepted");
  auto got = analyse("jmp qword ptr [rip + slot]\nend:\nslot: .quad 0");
  EXPECT_EQ(kind_of(*got), "accepted");
}

TEST(CfgAsm, ComputedJumpsStayRejected) {
  EXPECT_EQ(kind_of(*analyse("lea rax, [rdi + rsi]\njmp rax\nend:")), "indirect jump unresolved");
  EXPECT_EQ(kind_of(*analyse("mov rax, qword ptr [rdi + rsi*8]\njmp rax\nend:")), "indirect jump unresolved");
}

TEST(CfgAsm, XabortFallsThrough) {
  auto a = analyse("xabort 0\nret\nend:");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_EQ(a->cfg->instructions[0].flow, Flow::Next);
  EXPECT_EQ(a->cfg->blocks.size(), 1u);
}

TEST(CfgAsm, XendFallsThrough) {
  auto a = analyse("xend\nret\nend:");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_EQ(a->cfg->instructions[0].flow, Flow::Next);
  EXPECT_EQ(a->cfg->blocks.size(), 1u);
}

TEST(CfgAsm, BranchEncodingsTheRelocatorDoesNotKnowAreRejected) {
  // 66 c7 f8 00 00: xbegin rel16
  EXPECT_EQ(kind_of(*analyse(".byte 0x66, 0xc7, 0xf8, 0x00, 0x00\nret\nend:")), "unsupported branch encoding");
  EXPECT_EQ(kind_of(*analyse("xbegin fallback\nxend\nfallback: ret\nend:")), "accepted");  // rel32 form
}

TEST(CfgAsm, CallsIntoItsOwnBodyAreRejected) {
  EXPECT_EQ(kind_of(*analyse("call next\nnext: pop rax\nret\nend:")), "call into its own body");
}

}  // namespace
}  // namespace dyni::jit
