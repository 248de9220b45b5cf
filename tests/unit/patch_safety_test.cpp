// The live checks before an entry patch (dynid/patch_safety.h): threads
// inside the entry bytes, unknown stacks and changed live bytes.
#include "dynid/patch_safety.h"

#include <gtest/gtest.h>

namespace dyni {
namespace {

constexpr uint64_t kEntry = 0x401000;
const std::array<uint8_t, kPatchBytes> kFileBytes = {0x55, 0x48, 0x89, 0xe5, 0x53};  // push rbp; mov rbp,rsp; push rbx

ThreadStack stack_of(std::initializer_list<uint64_t> pcs, bool complete = true) {
  ThreadStack s;
  for (uint64_t pc : pcs) s.frames.push_back({pc, false});
  s.complete = complete;
  if (!complete) s.incomplete_why = "no unwind information past 0x7f0000001000";
  return s;
}

auto same_as_file = [](uint64_t) -> Result<std::array<uint8_t, kPatchBytes>> { return kFileBytes; };

SiteCheck check_one(const std::map<pid_t, ThreadStack>& stacks,
                    const std::function<Result<std::array<uint8_t, kPatchBytes>>(uint64_t)>& live = same_as_file) {
  PatchSite site{kEntry, kFileBytes};
  return check_patch_sites(std::span(&site, 1), stacks, live).at(0);
}

TEST(PatchSafety, PatchesWhenNoThreadIsInsideTheEntryBytes) {
  auto c = check_one({{1, stack_of({0x402000, 0x403000})}, {2, stack_of({kEntry, 0x403000})}, {3, stack_of({kEntry + 5})}});
  EXPECT_EQ(c.verdict, SiteVerdict::Patch) << c.reason;  // at the entry, or just past the patch: fine
}

TEST(PatchSafety, WaitsWhileAThreadOrASavedPcIsInside) {
  for (uint64_t pc : {kEntry + 1, kEntry + 4}) {
    // As a thread's own PC, and as a PC deep in another thread's stack
    // (a signal frame's interrupted PC, or a return address).
    EXPECT_EQ(check_one({{7, stack_of({pc})}}).verdict, SiteVerdict::Wait);
    auto deep = check_one({{1, stack_of({0x402000})}, {8, stack_of({0x7f0000000100, 0x402010, pc, 0x403000})}});
    EXPECT_EQ(deep.verdict, SiteVerdict::Wait);
    EXPECT_NE(deep.reason.find("thread 8"), std::string::npos) << deep.reason;
  }
}

TEST(PatchSafety, WaitsWhileAnyStackIsUnknown) {
  auto c = check_one({{1, stack_of({0x402000})}, {2, stack_of({0x7f0000001000}, false)}});
  EXPECT_EQ(c.verdict, SiteVerdict::Wait);
  EXPECT_NE(c.reason.find("thread 2"), std::string::npos) << c.reason;
}

TEST(PatchSafety, LeavesAloneBytesThatDifferFromTheFile) {
  auto uprobe = [](uint64_t) -> Result<std::array<uint8_t, kPatchBytes>> {
    return std::array<uint8_t, kPatchBytes>{0xcc, 0x48, 0x89, 0xe5, 0x53};
  };
  auto c = check_one({{1, stack_of({0x402000})}}, uprobe);
  EXPECT_EQ(c.verdict, SiteVerdict::LeaveAlone);
  EXPECT_NE(c.reason.find("differ"), std::string::npos);
  auto unreadable = [](uint64_t) -> Result<std::array<uint8_t, kPatchBytes>> { return fail("EIO"); };
  EXPECT_EQ(check_one({{1, stack_of({0x402000})}}, unreadable).verdict, SiteVerdict::Wait);
}

// A short jump to a pad (jit/entry_pads.h) changes 2 of its 5 bytes: a
// thread at the next instruction, inside the 5 but past the 2, waits for
// nothing; one inside the 2 waits.
TEST(PatchSafety, AShortJumpWaitsOnlyForThreadsInsideItsTwoBytes) {
  PatchSite site{kEntry, kFileBytes, 2};
  auto at = [&](uint64_t pc) { return check_patch_sites(std::span(&site, 1), {{1, stack_of({pc})}}, same_as_file).at(0).verdict; };
  EXPECT_EQ(at(kEntry + 1), SiteVerdict::Wait);
  EXPECT_EQ(at(kEntry + 2), SiteVerdict::Patch) << "the next instruction, written as the file has it";
  EXPECT_EQ(at(kEntry + 4), SiteVerdict::Patch);
}

// A pad goes back to the file's padding only when no thread can run it:
// no PC on any stack in its 5 bytes, its first included, and every stack known.
TEST(PatchSafety, APadGoesOnlyWhenNoThreadIsInItAndEveryStackIsKnown) {
  const uint64_t pad = 0x400ffb;
  EXPECT_TRUE(pad_may_go(pad, {{1, stack_of({0x402000, 0x403000})}, {2, stack_of({pad + 5})}}));
  EXPECT_FALSE(pad_may_go(pad, {{1, stack_of({pad})}})) << "about to run the pad's jmp";
  EXPECT_FALSE(pad_may_go(pad, {{1, stack_of({0x7f0000000100, pad, 0x403000})}})) << "a signal frame's PC";
  EXPECT_FALSE(pad_may_go(pad, {{1, stack_of({pad + 4})}}));
  EXPECT_FALSE(pad_may_go(pad, {{1, stack_of({0x402000})}, {2, stack_of({0x402000}, false)}})) << "an unknown stack";
}

}  // namespace
}  // namespace dyni
