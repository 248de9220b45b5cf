// CFG analysis on small assembled functions (LLVM MC): jump-table bounds the
// compilers emit, tail calls through pointers, and what stays rejected.
// Each text ends its function at the label `end`; data after it is module
// data the function may read (its jump tables).
#include <gtest/gtest.h>

#include <cstring>

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

// `relocated`: the text is a PIE's: each 8-byte slot from label `slots` to
// label `slots_end` gets a RELATIVE relocation whose addend is what the
// text put there (as a linker writes a PIE's table of code addresses).
std::unique_ptr<Analysed> analyse(const std::string& text, bool relocated = false) {
  auto out = std::make_unique<Analysed>();
  auto a = test::assemble_with_labels(text);
  EXPECT_TRUE(a) << a.error().message();
  if (!a) return out;
  out->assembly = std::move(*a);
  out->image.add(kBase, out->assembly.bytes, true);
  if (relocated) out->image.make_position_independent();
  if (relocated && out->assembly.labels.count("slots"))
    for (uint64_t at = out->assembly.labels["slots"]; at < out->assembly.labels.at("slots_end"); at += 8) {
      uint64_t addend;
      std::memcpy(&addend, out->assembly.bytes.data() + at, 8);
      out->image.add_relative_relocation(kBase + at, addend);
    }
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
bool rebuildable(const std::string& dispatch, const char* tail = kTableTail) {
  auto a = analyse(dispatch + tail);
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
  test rsi, rsi
  jne around
  cmp rdi, 2
  ja def
disp:
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
around:
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

// The forms of issue 12, proven by the register dataflow (register_facts.h).

const char* kLoopTail = R"(
c0: add ebx, 1
  jmp next
c1: add ebx, 2
  jmp next
c2: add ebx, 3
  jmp next
def: mov eax, ebx
  pop r15
  pop r14
  pop rbx
  ret
end:
  .p2align 2
table:
  .long c0 - table
  .long c1 - table
  .long c2 - table
)";

// The base is set once at the entry, in a callee-saved register, and the
// loop calls out: the call leaves r15 as it was (the ABI).
TEST(CfgAsm, ATableBaseHoistedOutOfTheLoopIsRebuilt) {
  EXPECT_TRUE(rebuildable(std::string(R"(
  push rbx
  push r14
  push r15
  xor ebx, ebx
  lea r15, [rip + table]
next:
  call qword ptr [rdi]
  mov r14d, eax
  cmp r14d, 2
  ja def
  mov eax, r14d
  movsxd rax, dword ptr [r15 + rax*4]
  add rax, r15
  jmp rax
)"), kLoopTail));
}

TEST(CfgAsm, ABaseRedefinedOnOnePathOrClobberedByACallIsNotProven) {
  auto redefined = analyse(std::string(R"(
  push rbx
  push r14
  push r15
  xor ebx, ebx
  lea r15, [rip + table]
next:
  call qword ptr [rdi]
  test eax, eax
  jne keep
  mov r15, rsi
keep:
  mov r14d, eax
  cmp r14d, 2
  ja def
  mov eax, r14d
  movsxd rax, dword ptr [r15 + rax*4]
  add rax, r15
  jmp rax
)") + kLoopTail);
  // The window patterns still find the lea and the compare: resolved, so
  // the copy's jump reads the original table, but not proven, so not rebuilt.
  ASSERT_TRUE(redefined->cfg) << redefined->cfg.error().message();
  ASSERT_EQ(redefined->cfg->tables.size(), 1u);
  EXPECT_FALSE(redefined->cfg->tables[0].proven);
  EXPECT_FALSE(redefined->cfg->tables[0].rebuildable);
  auto clobbered = analyse(std::string(R"(
  push rbx
  push r14
  push r15
  xor ebx, ebx
  lea r11, [rip + table]
next:
  call qword ptr [rdi]
  mov r14d, eax
  cmp r14d, 2
  ja def
  mov eax, r14d
  movsxd rax, dword ptr [r11 + rax*4]
  add rax, r11
  jmp rax
)") + kLoopTail);
  ASSERT_TRUE(clobbered->cfg) << clobbered->cfg.error().message();
  ASSERT_EQ(clobbered->cfg->tables.size(), 1u);
  EXPECT_FALSE(clobbered->cfg->tables[0].proven) << "r11 is the callee's to clobber";
}

TEST(CfgAsm, ABoundByMaskIsProven) {
  auto a = analyse(R"(
  and esi, 3
  lea r8, [rip + table]
  movsxd rsi, dword ptr [r8 + rsi*4]
  add rsi, r8
  jmp rsi
c0: mov eax, 1
  ret
c1: mov eax, 2
  ret
c2: mov eax, 3
  ret
end:
  .p2align 2
table:
  .long c0 - table
  .long c1 - table
  .long c2 - table
  .long c2 - table
  .long 0x7fff0000
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 1u);
  EXPECT_EQ(a->cfg->tables[0].targets.size(), 4u) << "and esi, 3: entries 0-3, not the word after";
  EXPECT_TRUE(a->cfg->tables[0].proven);
  EXPECT_TRUE(a->cfg->tables[0].rebuildable);
}

TEST(CfgAsm, AMaskTooWideForTheTableIsRejected) {
  auto a = analyse(R"(
  and esi, 7
  lea r8, [rip + table]
  movsxd rsi, dword ptr [r8 + rsi*4]
  add rsi, r8
  jmp rsi
c0: mov eax, 1
  ret
c1: mov eax, 2
  ret
end:
  .p2align 2
table:
  .long c0 - table
  .long c1 - table
  .long c0 - table
  .long c1 - table
  .long 0x7fff0000
  .long 0x7fff0000
  .long 0x7fff0000
  .long 0x7fff0000
)");
  EXPECT_EQ(kind_of(*a), "jump table entry outside the code");
}

TEST(CfgAsm, ABoundCheckedOnANarrowerCopyIsProven) {
  EXPECT_TRUE(rebuildable(std::string(R"(
  movzx r8d, r14b
  cmp r14b, 2
  ja def
  lea rdx, [rip + table]
  mov eax, r8d
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)")));
  auto wider = analyse(std::string(R"(
  movzx r8d, r14w
  cmp r14b, 2
  ja def
  lea rdx, [rip + table]
  mov eax, r8d
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  EXPECT_EQ(kind_of(*wider), "jump table without a provable bound") << "16 bits copied, 8 compared";
}

// Computed goto in a position-dependent executable (Debian's python3.11):
// the bound is the zero-extension of a byte, 256 absolute entries.
TEST(CfgAsm, AComputedGotoThroughAnAbsoluteTableIsRebuilt) {
  std::string text = R"(
f:
  movzx eax, byte ptr [rdi]
  add rdi, 1
  movzx eax, al
  mov rax, qword ptr [rax*8 + 0x401800]
  jmp rax
c0: add ebx, 1
  movzx eax, byte ptr [rdi]
  mov rax, qword ptr [rax*8 + 0x401800]
  jmp rax
c1: mov eax, ebx
  ret
end:
  .org 0x800
table:
  .quad 0x401000 + (c1 - f)
  .rept 255
  .quad 0x401000 + (c0 - f)
  .endr
)";
  auto a = analyse(text);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 2u);
  for (const JumpTable& t : a->cfg->tables) {
    EXPECT_EQ(t.entry_size, 8u);
    EXPECT_EQ(t.targets.size(), 256u);
    EXPECT_TRUE(t.rebuildable) << std::hex << t.jump_addr;
  }
}

// The same in a PIE: the base in a register, the entries relocated.
TEST(CfgAsm, AComputedGotoThroughARelocatedTableIsRebuilt) {
  std::string text = R"(
f:
  lea r15, [rip + table]
next:
  movzx eax, byte ptr [rdi]
  add rdi, 1
  and eax, 1
  mov rax, qword ptr [r15 + rax*8]
  jmp rax
c0: add ebx, 1
  jmp next
c1: mov eax, ebx
  ret
end:
  .p2align 3
table:
slots:
  .quad 0x401000 + (c1 - f)
  .quad 0x401000 + (c0 - f)
slots_end:
)";
  auto pie = analyse(text, true);
  ASSERT_TRUE(pie->cfg) << pie->cfg.error().message();
  ASSERT_EQ(pie->cfg->tables.size(), 1u);
  EXPECT_EQ(pie->cfg->tables[0].targets, (std::vector<uint64_t>{pie->at("c1"), pie->at("c0")}));
  EXPECT_TRUE(pie->cfg->tables[0].rebuildable);
  std::string unrelocated = text;
  unrelocated.replace(unrelocated.find("slots:"), 6, "");
  unrelocated.replace(unrelocated.find("slots_end:"), 10, "slots:\nslots_end:");
  auto no_relocation = analyse(unrelocated, true);
  EXPECT_EQ(kind_of(*no_relocation), "jump table unreadable") << "a PIE's code address the loader does not relocate";
}

TEST(CfgAsm, AnEntryThatStaysLiveAfterTheJumpIsNotRebuilt) {
  auto a = analyse(R"(
f:
  lea r15, [rip + table]
  movzx eax, byte ptr [rdi]
  and eax, 1
  mov rsi, qword ptr [r15 + rax*8]
  jmp rsi
c0: mov rax, rsi
  ret
c1: xor eax, eax
  ret
end:
  .p2align 3
table:
slots:
  .quad 0x401000 + (c0 - f)
  .quad 0x401000 + (c1 - f)
slots_end:
)", true);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 1u);
  EXPECT_TRUE(a->cfg->tables[0].proven);
  EXPECT_FALSE(a->cfg->tables[0].rebuildable) << "c0 returns the label's address";
}

TEST(CfgAsm, ATableThatOverlapsTheFunctionIsRejected) {
  auto a = analyse(R"(
  and esi, 1
  lea r8, [rip + table]
  movsxd rsi, dword ptr [r8 + rsi*4]
  add rsi, r8
  jmp rsi
  .p2align 2
table:
  .long c0 - table
  .long c0 - table
c0: mov eax, 1
  ret
end:
)");
  EXPECT_NE(kind_of(*a), "accepted");
}

// gcc's switch on a field: `cmp word [r14], 4; ja default; movzx eax, word
// [r14]`, the bound on the memory the load reads again.
TEST(CfgAsm, ABoundOnTheComparedMemoryIsProvenUntilAStore) {
  EXPECT_TRUE(rebuildable(R"(
  cmp word ptr [r14], 2
  ja def
  movzx eax, word ptr [r14]
  lea rcx, [rip + table]
  movsxd rax, dword ptr [rcx + rax*4]
  add rax, rcx
  jmp rax
)"));
  auto stored = analyse(std::string(R"(
  cmp word ptr [r14], 2
  ja def
  mov word ptr [rsi], 7
  movzx eax, word ptr [r14]
  lea rcx, [rip + table]
  movsxd rax, dword ptr [rcx + rax*4]
  add rax, rcx
  jmp rax
)") + kTableTail);
  EXPECT_EQ(kind_of(*stored), "jump table without a provable bound") << "the store may write [r14]";
  auto moved = analyse(std::string(R"(
  cmp word ptr [r14], 2
  ja def
  add r14, 2
  movzx eax, word ptr [r14]
  lea rcx, [rip + table]
  movsxd rax, dword ptr [rcx + rax*4]
  add rax, rcx
  jmp rax
)") + kTableTail);
  EXPECT_EQ(kind_of(*moved), "jump table without a provable bound") << "r14 points elsewhere now";
}

// python3.11: `cmp rbx, 7; jle L ... L: mov r14, rax; mov esi, 0; ja
// default; jmp [rbx*8 + T]`: the flags the ja tests were set a block before.
TEST(CfgAsm, AGuardWhoseCompareIsInTheBlockBeforeIsProven) {
  std::string text = R"(
f:
  cmp rbx, 2
  jle next
  mov eax, 1
next:
  mov r14, rax
  mov esi, 0
  ja def
  jmp qword ptr [rbx*8 + 0x401800]
c0: mov eax, 1
  ret
c1: mov eax, 2
  ret
def: xor eax, eax
  ret
end:
  .org 0x800
  .quad 0x401000 + (c0 - f)
  .quad 0x401000 + (c1 - f)
  .quad 0x401000 + (c0 - f)
)";
  auto a = analyse(text);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 1u);
  EXPECT_EQ(a->cfg->tables[0].targets.size(), 3u);
  EXPECT_TRUE(a->cfg->tables[0].rebuildable);
  std::string clobbered = text;
  clobbered.replace(clobbered.find("  mov esi, 0\n"), 13, "  add esi, 0\n");  // add writes the flags
  auto b = analyse(clobbered);
  // The window patterns may still guess the compare (the copy's jump then
  // reads the original table): never proven, never rebuilt.
  ASSERT_TRUE(!b->cfg || b->cfg->tables.size() == 1u);
  if (b->cfg) {
    EXPECT_FALSE(b->cfg->tables[0].proven) << "the flags are add's, not the compare's";
  }
}

// Review findings (issue 12): each once made a table provable that is not.

TEST(CfgAsm, TheHighByteRegistersBoundNothing) {
  auto ah = analyse(R"(
  movzx eax, word ptr [rdi]
  cmp al, 2
  ja def
  movzx ecx, ah
  cmp ecx, 9
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rcx*4]
  add rax, rdx
  jmp rax
c0: mov eax, 1
  ret
def: xor eax, eax
  ret
end:
  .p2align 2
table:
  .rept 10
  .long c0 - table
  .endr
)");
  ASSERT_TRUE(ah->cfg) << ah->cfg.error().message();
  ASSERT_EQ(ah->cfg->tables.size(), 1u);
  EXPECT_EQ(ah->cfg->tables[0].targets.size(), 10u) << "ah is bits 8-15 of rax, which cmp al says nothing of";
  auto compared = analyse(std::string(R"(
  movzx eax, byte ptr [rdi]
  cmp ah, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)") + kTableTail);
  EXPECT_FALSE(compared->cfg && compared->cfg->tables[0].proven) << "cmp ah bounds bits 8-15, not rax";
}

TEST(CfgAsm, ATableInWritableDataIsNotRebuilt) {
  auto a = test::assemble_with_labels(R"(
  cmp rdi, 1
  ja def
  lea rdx, [rip + 0x1000]
after:
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
def: xor eax, eax
  ret
end:
)");
  ASSERT_TRUE(a) << a.error().message();
  // The table sits in its own range 0x1000 past the lea's end: entries relative to it.
  const uint64_t table = kBase + a->labels.at("after") + 0x1000;
  std::vector<uint8_t> entries(8);
  for (int k = 0; k < 2; ++k) {
    int32_t rel = static_cast<int32_t>(kBase + a->labels.at("def") - table);
    std::memcpy(entries.data() + 4 * k, &rel, 4);
  }
  for (bool writable : {false, true}) {
    ModuleImage image;
    image.add(kBase, a->bytes, true);
    image.add(table, entries, false, writable);
    auto cfg = build_cfg(elf::Function{kBase, a->labels.at("end"), "f", false, 0}, image);
    ASSERT_TRUE(cfg) << cfg.error().message();
    ASSERT_EQ(cfg->tables.size(), 1u);
    EXPECT_TRUE(cfg->tables[0].proven);
    EXPECT_EQ(cfg->tables[0].rebuildable, !writable) << "a table the process may rewrite is read where it is";
  }
}

TEST(CfgAsm, AnEntryKeptPastAPartialZeroingIsNotRebuilt) {
  auto a = analyse(R"(
f:
  lea r15, [rip + table]
  movzx eax, byte ptr [rdi]
  and eax, 1
  mov rax, qword ptr [r15 + rax*8]
  jmp rax
c0: xor al, al
  mov qword ptr [rsi], rax
  ret
c1: xor eax, eax
  ret
end:
  .p2align 3
table:
slots:
  .quad 0x401000 + (c0 - f)
  .quad 0x401000 + (c1 - f)
slots_end:
)", true);
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_TRUE(a->cfg->tables[0].proven);
  EXPECT_FALSE(a->cfg->tables[0].rebuildable) << "xor al, al leaves bits 8-63 of the label's address";
}

TEST(CfgAsm, ANumberIsNoTableBaseInAPie) {
  std::string text = R"(
f:
  mov r15d, 0x401800
  movzx eax, byte ptr [rdi]
  and eax, 1
  mov rax, qword ptr [r15 + rax*8]
  jmp rax
c0: mov eax, 1
  ret
c1: xor eax, eax
  ret
end:
  .org 0x800
slots:
  .quad 0x401000 + (c0 - f)
  .quad 0x401000 + (c1 - f)
slots_end:
)";
  auto fixed = analyse(text);
  ASSERT_TRUE(fixed->cfg) << fixed->cfg.error().message();
  EXPECT_TRUE(fixed->cfg->tables[0].rebuildable) << "at its link-time address the number is the table's";
  auto pie = analyse(text, true);
  EXPECT_EQ(kind_of(*pie), "indirect jump unresolved") << "in a PIE the table moves, the number does not";
}

// Second review's cases (issue 12): the entries a rebuilt table gets, or 0
// when it is not rebuilt (or the function is rejected).
uint64_t rebuilt_entries(const std::string& text) {
  auto a = analyse(text + kTableTail);
  if (!a->cfg || a->cfg->tables.size() != 1) return 0;
  const JumpTable& t = a->cfg->tables[0];
  return t.rebuildable ? t.targets.size() : 0;
}

TEST(CfgAsm, AStoreBetweenAMemoryCompareAndItsJccLosesTheBound) {
  EXPECT_EQ(rebuilt_entries(R"(
  cmp dword ptr [rdi], 2
  mov dword ptr [rdi], 200
  ja def
  mov eax, dword ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u) << "the store between cmp and ja writes the compared memory";
  EXPECT_EQ(rebuilt_entries(R"(
  cmp dword ptr [rdi], 2
  call qword ptr [rsi]
  ja def
  mov eax, dword ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u) << "call (resets flags)";
  EXPECT_EQ(rebuilt_entries(R"(
  cmp dword ptr [rdi], 2
  jmp b
b:
  mov dword ptr [rsi], 200
  ja def
  mov eax, dword ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u) << "aliasing store in a later block, before the jcc";
}

TEST(CfgAsm, StringInstructionsMoveRsiAndRdi) {
  EXPECT_EQ(rebuilt_entries(R"(
  cmp byte ptr [rdi], 2
  ja def
  scasb
  movzx eax, byte ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u) << "scasb moves rdi: [rdi] is another byte";
  EXPECT_EQ(rebuilt_entries(R"(
  mov edi, edi
  cmp edi, 2
  ja def
  scasb
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)"), 0u) << "scasb increments rdi, the index";
  EXPECT_EQ(rebuilt_entries(R"(
  mov esi, esi
  cmp esi, 2
  ja def
  repe cmpsb
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rsi*4]
  add rax, rdx
  jmp rax
)"), 0u) << "repe cmpsb advances rsi, the index";
}

TEST(CfgAsm, ALoadIntoItsOwnAddressRegisterKeepsTheBound) {
  EXPECT_EQ(rebuilt_entries(R"(
  cmp dword ptr [rax], 2
  ja def
  mov eax, dword ptr [rax]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 3u) << "load into its own address register";
}

TEST(CfgAsm, WhatEndsAGuard) {
  EXPECT_EQ(rebuilt_entries(R"(
  cmp edi, 2
  mov edi, 100
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)"), 0u) << "redefined between cmp and jcc";
  EXPECT_EQ(rebuilt_entries(R"(
  mov edi, edi
  cmp edi, 2
  ja b
b:
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)"), 0u) << "both edges to one block";
  EXPECT_EQ(rebuilt_entries(R"(
  mov edi, edi
  cmp edi, 2
  ja def
  shl edi, cl
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)"), 0u);
  EXPECT_EQ(rebuilt_entries(R"(
  cmp byte ptr [rdi], 2
  ja def
  lock xadd dword ptr [rsi], eax
  movzx eax, byte ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u);
  EXPECT_EQ(rebuilt_entries(R"(
  cmp byte ptr [rdi], 2
  ja def
  push rax
  pop rax
  movzx eax, byte ptr [rdi]
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rax*4]
  add rax, rdx
  jmp rax
)"), 0u);
  EXPECT_EQ(rebuilt_entries(R"(
  mov edi, edi
loop:
  cmp edi, 2
  ja def
  lea rdx, [rip + table]
  movsxd rax, dword ptr [rdx + rdi*4]
  add rax, rdx
  jmp rax
)"), 3u);
}

TEST(CfgAsm, AnEntryReadInTheColdPartIsNotRebuilt) {
  auto a = analyse(R"(
f:
  movzx eax, byte ptr [rdi]
  and eax, 1
  mov rax, qword ptr [rax*8 + 0x401800]
  jmp rax
c0: test esi, esi
  jne cold
  xor eax, eax
  ret
c1: xor eax, eax
  ret
end:
cold:
  mov qword ptr [rdx], rax
  ret
  .org 0x800
table:
  .quad 0x401000 + (c1 - f)
  .quad 0x401000 + (c0 - f)
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  ASSERT_EQ(a->cfg->tables.size(), 1u);
  EXPECT_FALSE(a->cfg->tables[0].rebuildable) << "rax (the label's address) is read by the .cold part";
}

// Third review's cases (issue 12): a computed goto through rax whose
// targets are given, with code outside the function after `end`.
std::unique_ptr<Analysed> goto_with(const std::string& targets_and_cold, const std::string& extra_entries = "") {
  return analyse(R"(
f:
  movzx eax, byte ptr [rdi]
  and eax, 1
  mov rax, qword ptr [rax*8 + 0x401800]
  jmp rax
)" + targets_and_cold + R"(
  .org 0x800
table:
  .quad 0x401000 + (c1 - f)
  .quad 0x401000 + (c0 - f)
)" + extra_entries);
}

void expect_not_rebuildable(const Analysed& a, const char* why) {
  ASSERT_TRUE(a.cfg) << a.cfg.error().message();
  ASSERT_GE(a.cfg->tables.size(), 1u);
  for (auto& t : a.cfg->tables) {
    if (t.entry_size == 8) {
      EXPECT_FALSE(t.rebuildable) << why;
      return;
    }
  }
}

TEST(CfgAsm, AnEntryReadThroughASwitchIntoTheColdPartIsNotRebuilt) {
  auto a = goto_with(R"(
c0: cmp esi, 1
  ja c1
  jmp qword ptr [rsi*8 + 0x401810]
c1: xor eax, eax
  ret
end:
cold:
  mov qword ptr [rdx], rax
  ret
)", R"(
  .quad 0x401000 + (c1 - f)
  .quad 0x401000 + (cold - f)
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_FALSE(a->cfg->tables[0].rebuildable) << "cold switch entry stores rax";
}

TEST(CfgAsm, AnEntryReadThroughARelativeSwitchIntoTheColdPartIsNotRebuilt) {
  auto a = goto_with(R"(
c0: cmp esi, 1
  ja c1
  lea rdx, [rip + rtab]
  movsxd rcx, dword ptr [rdx + rsi*4]
  add rcx, rdx
  jmp rcx
c1: xor eax, eax
  ret
end:
cold:
  mov qword ptr [rdi], rax
  ret
  .p2align 2
rtab:
  .long c1 - rtab
  .long cold - rtab
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  for (auto& t : a->cfg->tables) {
    if (t.entry_size == 8) {
      EXPECT_FALSE(t.rebuildable) << "cold switch entry stores rax";
    }
  }
}

TEST(CfgAsm, AnIndirectJumpInTheColdPartKeepsTheEntryLive) {
  auto a = goto_with(R"(
c0: test esi, esi
  jne cold
  xor eax, eax
  ret
c1: xor eax, eax
  ret
back:
  mov qword ptr [rdx], rax
  ret
end:
cold:
  lea rcx, [rip + back]
  jmp rcx
)");
  expect_not_rebuildable(*a, "cold part jumps through rcx back to code storing rax");
}

TEST(CfgAsm, BsfKeepsTheEntryWhenItsSourceIsZero) {
  auto a = goto_with(R"(
c0: bsf rax, rsi
  mov qword ptr [rdx], rax
  ret
c1: xor eax, eax
  ret
end:
)");
  expect_not_rebuildable(*a, "bsf with a zero source leaves rax");
}

TEST(CfgAsm, BsfInTheColdPartKeepsTheEntry) {
  auto a = goto_with(R"(
c0: test esi, esi
  jne cold
  xor eax, eax
  ret
c1: xor eax, eax
  ret
end:
cold:
  bsf rax, rsi
  ret
)");
  expect_not_rebuildable(*a, "bsf with zero source leaves rax, returned");
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

// python3.11's PyObject_Free: the allocator's pointer is loaded, compared,
// and jumped through blocks later.
TEST(CfgAsm, ATailCallThroughAPointerLoadedBlocksBeforeLeavesTheFunction) {
  auto a = analyse(R"(
  mov rax, qword ptr [rip + slot]
  mov rdx, qword ptr [rip + slot + 8]
  cmp rax, 0x1234
  jne other
  xor eax, eax
  ret
other:
  mov rsi, rdi
  mov rdi, rdx
  jmp rax
end:
slot: .quad 0
  .quad 0
)");
  ASSERT_TRUE(a->cfg) << a->cfg.error().message();
  EXPECT_TRUE(a->cfg->blocks.back().exits);
  auto computed = analyse(R"(
  mov rax, qword ptr [rip + slot]
  test rdi, rdi
  jne other
  lea rax, [rdi + rsi]
other:
  jmp rax
end:
slot: .quad 0
)");
  EXPECT_EQ(kind_of(*computed), "indirect jump unresolved") << "on one path rax is arithmetic";
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
