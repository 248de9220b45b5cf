// Direct call sites in code left in the original, re-pointed at the copies
// (jit/call_sites.h): which sites are found, the bytes they get, and what is
// left alone. Inputs are assembled (LLVM MC) at a fixed address.
#include "jit/call_sites.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "jit/decoder.h"
#include "tests/unit/assembler.h"

namespace dyni::jit {
namespace {

constexpr uint64_t kBase = 0x401000;
constexpr uint64_t kCopyOfHot = 0x10401000;  // where hot's entry jump leads
constexpr uint64_t kCopyOfWarm = 0x10402000;

// hot and warm are copied; cold calls them (call, jcc and jmp, all rel32:
// the padding puts hot out of rel8's reach), and calls other, which is not.
const char* kText = R"(
hot:  lea rax, [rdi + rsi]
      ret
warm: mov rax, rdi
      ret
other: xor eax, eax
      ret
      .fill 200, 1, 0x90
cold: push rbx
s_call: call hot
      test rax, rax
s_jcc: jne hot
      call other
      mov rbx, rax
      call warm
s_ind: call qword ptr [rip + 0x100]
      pop rbx
s_jmp: jmp hot
data: .byte 0x0f, 0x0b, 0xff, 0xff, 0xff
end:
)";

struct Module {
  test::Assembly assembly;
  ModuleImage image;
  uint64_t at(const std::string& label) const { return kBase + assembly.labels.at(label); }
  elf::Function function(const std::string& from, const std::string& to) const {
    return {at(from), at(to) - at(from), from, true, 0};
  }
};

std::unique_ptr<Module> assembled() {
  auto m = std::make_unique<Module>();
  auto a = test::assemble_with_labels(kText);
  EXPECT_TRUE(a) << a.error().message();
  if (!a) return m;
  m->assembly = std::move(*a);
  m->image.add(kBase, m->assembly.bytes, true);
  return m;
}

CopiedCode copies_of(const Module& m) {
  CopiedCode c;
  c.entries = {{m.at("hot"), kCopyOfHot}, {m.at("warm"), kCopyOfWarm}};
  c.functions = {m.at("hot"), m.at("warm")};
  c.patch_bytes = {m.at("hot"), m.at("warm")};
  return c;
}

// The instruction that holds a site, with the site's replacement applied.
Instruction patched(const Module& m, const CallSitePatch& p, uint64_t instruction) {
  auto bytes = m.image.read(instruction, p.addr - instruction + kCallSiteBytes);
  EXPECT_TRUE(bytes);
  std::vector<uint8_t> b(bytes->begin(), bytes->end());
  std::copy(p.replacement.begin(), p.replacement.end(), b.begin() + static_cast<long>(p.addr - instruction));
  auto in = decode_one(b, instruction);
  EXPECT_TRUE(in) << in.error().message();
  return *in;
}

TEST(CallSites, CallsAndJumpsToCopiesAreRepointed) {
  auto m = assembled();
  std::vector<elf::Function> callers = {m->function("cold", "data")};
  CallSitePlan plan = plan_call_sites(m->image, callers, copies_of(*m));
  EXPECT_EQ(plan.callers_scanned, 1u);
  ASSERT_EQ(plan.patches.size(), 3u) << "call hot, call warm, jmp hot; not jne (its 0F byte would stay unchecked), "
                                        "not other, not the indirect call";
  struct Expect { uint64_t instruction, addr, copy, callee; ZydisMnemonic mnemonic; };
  const uint64_t call_warm = m->at("s_ind") - 5;
  for (const Expect& e : {Expect{m->at("s_call"), m->at("s_call"), kCopyOfHot, m->at("hot"), ZYDIS_MNEMONIC_CALL},
                          Expect{call_warm, call_warm, kCopyOfWarm, m->at("warm"), ZYDIS_MNEMONIC_CALL},
                          Expect{m->at("s_jmp"), m->at("s_jmp"), kCopyOfHot, m->at("hot"), ZYDIS_MNEMONIC_JMP}}) {
    auto p = std::find_if(plan.patches.begin(), plan.patches.end(), [&](const auto& c) { return c.addr == e.addr; });
    ASSERT_NE(p, plan.patches.end()) << std::hex << "no site at " << e.addr;
    EXPECT_EQ(p->caller, m->at("cold"));
    EXPECT_EQ(p->callee, e.callee);
    // The 5 bytes are the file's, and lead from the entry to the copy.
    auto file = m->image.read(p->addr, kCallSiteBytes);
    ASSERT_TRUE(file);
    EXPECT_TRUE(std::equal(file->begin(), file->end(), p->original.begin()));
    EXPECT_EQ(rel32_target(p->addr, p->original), e.callee);
    EXPECT_EQ(rel32_target(p->addr, p->replacement), e.copy);
    EXPECT_EQ(p->original[0], p->replacement[0]) << "the first byte never changes";
    // Decoded with its new bytes, the instruction is the same one, to the copy.
    Instruction in = patched(*m, *p, e.instruction);
    EXPECT_EQ(in.mnemonic, e.mnemonic);
    EXPECT_EQ(in.target, e.copy);
  }
}

TEST(CallSites, CopiedCallersAndUndecodableOnesAreLeftAlone) {
  auto m = assembled();
  // cold's range taken to `end` holds bytes that do not decode (ud2 and a
  // bad opcode run past the end): it is not scanned, and says why. hot is
  // copied: never a caller.
  std::vector<elf::Function> callers = {m->function("cold", "end"), m->function("hot", "warm")};
  CallSitePlan plan = plan_call_sites(m->image, callers, copies_of(*m));
  EXPECT_TRUE(plan.patches.empty());
  EXPECT_EQ(plan.callers_scanned, 0u) << "hot is copied itself, cold does not decode to its end";
  ASSERT_EQ(plan.unscanned.size(), 1u);
  EXPECT_NE(plan.unscanned[0].find("func_"), std::string::npos) << plan.unscanned[0];
}

TEST(CallSites, ACallerWithABranchIntoAnInstructionIsNotScanned) {
  auto a = test::assemble_with_labels(R"(
hot:  ret
      .fill 200, 1, 0x90
f:    test edi, edi
      je inside + 1
inside: call hot
      ret
end:
)");
  ASSERT_TRUE(a) << a.error().message();
  ModuleImage image;
  image.add(kBase, a->bytes, true);
  CopiedCode c;
  c.entries = {{kBase, kCopyOfHot}};
  c.functions = c.patch_bytes = {kBase};
  const uint64_t f = kBase + a->labels.at("f");
  std::vector<elf::Function> callers = {{f, kBase + a->labels.at("end") - f, "f", true, 0}};
  CallSitePlan plan = plan_call_sites(image, callers, c);
  EXPECT_TRUE(plan.patches.empty());
  ASSERT_EQ(plan.unscanned.size(), 1u);
  EXPECT_NE(plan.unscanned[0].find("lands inside an instruction"), std::string::npos) << plan.unscanned[0];
}

TEST(CallSites, ACopyOutOfRel32ReachIsLeftAlone) {
  auto m = assembled();
  std::vector<elf::Function> callers = {m->function("cold", "data")};
  CopiedCode far = copies_of(*m);
  far.entries[m->at("hot")] = kBase + (uint64_t{3} << 30);
  CallSitePlan plan = plan_call_sites(m->image, callers, far);
  ASSERT_EQ(plan.patches.size(), 1u);
  EXPECT_EQ(plan.patches[0].callee, m->at("warm"));
}

TEST(CallSites, ASiteOverlappingAnEntryPatchIsLeftAlone) {
  auto m = assembled();
  // An entry patch (an endbr64 function's lies 4 bytes in) over the call at s_call.
  CopiedCode copies = copies_of(*m);
  copies.patch_bytes.insert(m->at("s_call") + 2);
  std::vector<elf::Function> callers = {m->function("cold", "data")};
  CallSitePlan plan = plan_call_sites(m->image, callers, copies);
  EXPECT_TRUE(std::none_of(plan.patches.begin(), plan.patches.end(),
                           [&](const auto& p) { return p.addr == m->at("s_call"); }));
  EXPECT_EQ(plan.patches.size(), 2u);
}

// A function table keeps nested entries: a caller inside another is
// scanned twice, and its sites are kept once.
TEST(CallSites, ANestedCallerGivesEachSiteOnce) {
  auto m = assembled();
  std::vector<elf::Function> twice = {m->function("cold", "data"), m->function("s_call", "data")};
  CallSitePlan plan = plan_call_sites(m->image, twice, copies_of(*m));
  EXPECT_EQ(plan.patches.size(), 3u);
}

}  // namespace
}  // namespace dyni::jit
