// Functions that use their return address, found on small assembled inputs,
// and their callers kept out of the cache: executed, a copy of such a caller
// computes something else; the pipeline rejects it on this binary.
#include <gtest/gtest.h>

#include "jit/pipeline.h"
#include "jit/return_address.h"
#include "tests/unit/asm_module.h"
#include "tests/unit/assembler.h"
#include "tests/unit/this_binary.h"

extern "C" long jit_calls_return_address(long);

namespace dyni::jit {
namespace {

constexpr uint64_t kBase = 0x401000;

// `text` as one function at kBase; whether it uses its return address.
bool uses(const std::string& text) {
  auto bytes = test::assemble(text);
  EXPECT_TRUE(bytes) << bytes.error().message();
  if (!bytes) return false;
  ModuleImage image;
  image.add(kBase, *bytes, true);
  auto cfg = build_cfg(elf::Function{kBase, bytes->size(), "f", false, 0}, image);
  EXPECT_TRUE(cfg) << cfg.error().message();
  return cfg && uses_return_address(*cfg);
}

TEST(ReturnAddress, ReadsOfTheSlotAreFound) {
  EXPECT_TRUE(uses("mov rax, qword ptr [rsp]\nret"));  // a PC thunk
  EXPECT_TRUE(uses("push rbx\nmov rax, qword ptr [rsp + 8]\npop rbx\nret"));
  EXPECT_TRUE(uses("sub rsp, 24\nmov rax, qword ptr [rsp + 24]\nadd rsp, 24\nret"));
  EXPECT_TRUE(uses("push rbp\nmov rbp, rsp\nsub rsp, 32\nmov rax, qword ptr [rbp + 8]\nleave\nret"));
  EXPECT_TRUE(uses("pop rcx\npush rcx\nret"));                       // pops it
  EXPECT_TRUE(uses("lea rax, [rsp]\nret"));                          // takes its address
  EXPECT_TRUE(uses("mov qword ptr [rsp], rdi\nret"));                // overwrites it
  EXPECT_TRUE(uses("test edi, edi\nje 1f\npush rbx\ncmp qword ptr [rsp + 8], rsi\npop rbx\n1: ret"));
}

// A fragment split out of a function (gcc's .cold part) starts inside that
// function's frame: its CFI places the return address.
TEST(ReturnAddress, AFragmentsEntryFrameComesFromItsCfi) {
  elf::CfiState cold;
  cold.cfa = {6, 16};  // CFA = rbp + 16
  cold.regs[16] = {elf::RegisterRule::Kind::AtCfa, -8};
  EntryFrame e = entry_frame(cold);
  EXPECT_FALSE(e.depth);
  EXPECT_EQ(e.rbp, 8);
  auto bytes = test::assemble("pop rax\npop rbx\npop rbp\nret");  // at depth 0 this would pop it
  ASSERT_TRUE(bytes);
  ModuleImage image;
  image.add(kBase, *bytes, true);
  auto cfg = build_cfg(elf::Function{kBase, bytes->size(), "f.cold", false, 0}, image);
  ASSERT_TRUE(cfg);
  EXPECT_TRUE(uses_return_address(*cfg));
  EXPECT_FALSE(uses_return_address(*cfg, e));
  elf::CfiState pushed;
  pushed.cfa = {7, 24};  // CFA = rsp + 24: two slots pushed
  EXPECT_EQ(entry_frame(pushed).depth, 16);
}

TEST(ReturnAddress, OtherStackSlotsAreNot) {
  EXPECT_FALSE(uses("mov rax, qword ptr [rsp + 8]\nret"));           // the first stack argument
  EXPECT_FALSE(uses("push rbx\nmov rax, qword ptr [rsp]\npop rbx\nret"));  // the saved rbx
  EXPECT_FALSE(uses("push rbp\nmov rbp, rsp\nmov rax, qword ptr [rbp]\npop rbp\nret"));
  EXPECT_FALSE(uses("sub rsp, 8\ncall rax\nmov rax, qword ptr [rsp]\nadd rsp, 8\nret"));
  // A loop that pushes: its depth becomes unknown, and the analysis ends.
  EXPECT_FALSE(uses("1: push rdi\ndec esi\njne 1b\nmov rax, qword ptr [rsp]\nret"));
  // Depth unknown after realignment: nothing claimed.
  EXPECT_FALSE(uses("push rbp\nmov rbp, rsp\nand rsp, -32\nmov rax, qword ptr [rsp]\nleave\nret"));
}

// get_pc reads its return address; f compares it with its own address.
// h tail-jumps to get_pc: it passes on its own return address.
const char* kPcThunk = R"(
get_pc:
  mov rax, qword ptr [rsp]
  ret
f:
  call get_pc
  lea rcx, [rip + f]
  sub rax, rcx
  add rax, rdi
  ret
h:
  jmp get_pc
g:
  call h
  add rax, rdi
  ret
end:
)";

TEST(ReturnAddress, CallersOfUsersAreFoundThroughTailCalls) {
  auto m = test::AsmModule::load(kPcThunk, {"get_pc", "f", "h", "g"});
  ASSERT_TRUE(m);
  ReturnAddressUsers users([&](uint64_t addr) -> ReturnAddressUsers::Analysed {
    for (const char* name : {"get_pc", "f", "h", "g"})
      if (m->addr(name) == addr) return {&m->cfg(name), {}};
    return {};
  });
  EXPECT_TRUE(users.uses(m->addr("get_pc")));
  EXPECT_TRUE(users.uses(m->addr("h")));
  EXPECT_FALSE(users.uses(m->addr("f")));
  EXPECT_EQ(reason_kind(check_callees(m->cfg("f"), users).error().message()), "calls a user of its return address");
  EXPECT_EQ(reason_kind(check_callees(m->cfg("g"), users).error().message()), "calls a user of its return address");
  EXPECT_TRUE(check_callees(m->cfg("get_pc"), users));
}

// Why: executed, f's copy computes something else than f.
TEST(ReturnAddress, ACopiedCallerWouldComputeSomethingElse) {
  auto m = test::AsmModule::load(kPcThunk, {"get_pc", "f", "h", "g"});
  ASSERT_TRUE(m);
  test::Run original = test::run_isolated(m->addr("f"), {{0, 0}, {7, 0}});
  ASSERT_EQ(original.outcome, test::Outcome::Returned);
  EXPECT_EQ(original.results, (std::vector<long>{5, 12}));  // the call's length, plus x
  jit::CodeCache cache = m->build({"f"}, [](const FunctionCfg& cfg) { return original_layout(cfg); });
  test::Run copied = test::run_isolated(test::AsmModule::copy_of(cache, m->addr("f")), {{0, 0}, {7, 0}});
  ASSERT_EQ(copied.outcome, test::Outcome::Returned);
  EXPECT_NE(copied.results, original.results);
}

class ReturnAddressInPipeline : public ThisBinary {};

TEST_F(ReturnAddressInPipeline, CallersOfUsersStayInTheOriginalCode) {
  ModuleInput input{table.get(), image.get(), nullptr, {}, provisional_cache_base(*table), {}, {}, 0};
  use_unwind_info(input, *file);
  input.hot = {named("jit_calls_return_address")->addr, named("jit_return_address")->addr};
  auto plan = optimize_module(input);
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->rejected.size(), 1u);
  EXPECT_EQ(plan->rejected[0].addr, named("jit_calls_return_address")->addr);
  EXPECT_EQ(reason_kind(plan->rejected[0].reason), "calls a user of its return address") << plan->rejected[0].reason;
  ASSERT_EQ(plan->cache.functions.size(), 1u);
  EXPECT_EQ(plan->cache.functions[0].original_entry, named("jit_return_address")->addr);
  EXPECT_EQ(jit_calls_return_address(3), jit_calls_return_address(3));  // kept, so the linker keeps it
}

}  // namespace
}  // namespace dyni::jit
