// Branch stacks (LBR) end to end without a PMU: this machine has none, so the
// records are built by hand in the kernel's layout. Parsing a sample record,
// turning branch stacks into per-function taken branches and straight-line
// traces (Profile), and those into CFG edge counts and a layout (jit).
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <cstring>

#include "jit/block_layout.h"
#include "jit/edge_profile.h"
#include "profiler/profile.h"
#include "profiler/sampler.h"
#include "tests/unit/assembler.h"
#include "tests/unit/this_binary.h"

extern "C" long jit_loop(const int*, int);

namespace dyni {
namespace {

std::vector<uint8_t> record(std::initializer_list<uint64_t> u64s_after_pid_tid, uint64_t ip, uint32_t pid,
                            uint32_t tid) {
  std::vector<uint8_t> out(16);
  std::memcpy(out.data(), &ip, 8);
  std::memcpy(out.data() + 8, &pid, 4);
  std::memcpy(out.data() + 12, &tid, 4);
  for (uint64_t v : u64s_after_pid_tid) {
    out.resize(out.size() + 8);
    std::memcpy(out.data() + out.size() - 8, &v, 8);
  }
  return out;
}

TEST(Lbr, SampleRecordsParseInTheKernelsOrder) {
  // ip, pid/tid, callchain {nr=3: PERF_CONTEXT_USER, ip, caller}, branch stack {nr=2: (from,to,flags) x2}
  auto body = record({3, PERF_CONTEXT_USER, 0x1000, 0x2000, 2, 0x1010, 0x1020, 0, 0x1030, 0x1040, 0}, 0x1000, 42, 43);
  pid_t pid = 0;
  auto s = profiler::parse_sample(body, {true, true}, pid);
  ASSERT_TRUE(s);
  EXPECT_EQ(pid, 42);
  EXPECT_EQ(s->tid, 43);
  EXPECT_EQ(s->callchain, (std::vector<uint64_t>{0x2000}));
  ASSERT_EQ(s->branches.size(), 2u);
  EXPECT_EQ(s->branches[1].from, 0x1030u);
  EXPECT_EQ(s->branches[1].to, 0x1040u);
  // Truncated branch stacks and absurd counts are refused, not read past.
  body.resize(body.size() - 4);
  EXPECT_FALSE(profiler::parse_sample(body, {true, true}, pid));
  EXPECT_FALSE(profiler::parse_sample(record({1000000}, 0x1000, 1, 1), {false, true}, pid));
  // Without branch stacks in the format, the same bytes are a plain sample.
  EXPECT_TRUE(profiler::parse_sample(record({}, 0x1000, 1, 1), {false, false}, pid));
}

// With descendants followed, the time comes after pid/tid.
TEST(Lbr, ATimedSampleCarriesItsTimeAfterPidAndTid) {
  auto body = record({777, 1, PERF_CONTEXT_USER}, 0x1000, 42, 43);
  pid_t pid = 0;
  uint64_t time = 0;
  auto s = profiler::parse_sample(body, {true, false, true}, pid, &time);
  ASSERT_TRUE(s);
  EXPECT_EQ(time, 777u);
  EXPECT_TRUE(s->callchain.empty());
  body.resize(20);  // cut inside the time
  EXPECT_FALSE(profiler::parse_sample(body, {false, false, true}, pid, &time));
}

// The process tree a sampler that follows descendants keeps (sampler.h).
TEST(DescendantTree, FollowsForksUntilExecOrExitAndKnowsWhatItNeverHeardOf) {
  profiler::DescendantTree tree(100);
  EXPECT_EQ(tree.member(100, 5), true);
  EXPECT_EQ(tree.member(200, 5), std::nullopt) << "not heard of: its fork record may come later";
  tree.forked(200, 100, 10);  // a child
  tree.forked(300, 200, 20);  // a grandchild
  tree.forked(400, 999, 20);  // another process's child
  EXPECT_EQ(tree.member(200, 9), false) << "before its fork";
  EXPECT_EQ(tree.member(200, 10), true);
  EXPECT_EQ(tree.member(300, 25), true);
  EXPECT_EQ(tree.member(400, 25), std::nullopt);
  tree.execd(300, 30);  // runs another program: other addresses
  EXPECT_EQ(tree.member(300, 29), true);
  EXPECT_EQ(tree.member(300, 30), false);
  tree.forked(500, 300, 31);  // forked after the exec: not ours
  EXPECT_EQ(tree.member(500, 35), std::nullopt);
  tree.exited(200, 40);
  EXPECT_EQ(tree.member(200, 40), false);
  tree.forked(200, 100, 50);  // the pid reused by a new child
  EXPECT_EQ(tree.member(200, 45), false);
  EXPECT_EQ(tree.member(200, 55), true);
  tree.exited(100, 60);  // the root stays: the sampler ends with the target
  EXPECT_EQ(tree.member(100, 70), true);
  tree.forget_before(45);
  EXPECT_EQ(tree.member(300, 29), std::nullopt) << "ended at 30, forgotten";
  EXPECT_EQ(tree.member(200, 55), true);
}

// Members forked before the sampler came (relatives) are members from the
// start, with what they fork; a pid taken by a process that is not ours
// ends the span its exit record (lost) left open.
TEST(DescendantTree, RelativesAreMembersFromTheStartAndAReusedPidIsNotOurs) {
  profiler::DescendantTree tree(100, {150, 160});
  EXPECT_EQ(tree.member(150, 1), true);
  tree.forked(170, 160, 10);
  EXPECT_EQ(tree.member(170, 11), true) << "a relative's child";
  tree.forked(150, 999, 20);  // 150's exit went unseen; its pid is another process's now
  EXPECT_EQ(tree.member(150, 19), true);
  EXPECT_EQ(tree.member(150, 21), false);
}

// Branch stacks inside a real function of this process become taken branches
// and traces at the right offsets.
class LbrProfile : public jit::ThisBinary {};

TEST_F(LbrProfile, BranchStacksBecomeTakenBranchesAndTraces) {
  const elf::Function* fn = named("jit_loop");
  ASSERT_NE(fn, nullptr);
  auto cfg = jit::build_cfg(*fn, *image);
  ASSERT_TRUE(cfg);
  // The loop's back edge: the last jcc whose target lies before it.
  const jit::Instruction* back = nullptr;
  for (const auto& in : cfg->instructions)
    if (in.flow == jit::Flow::CondBranch && in.target < in.addr) back = &in;
  ASSERT_NE(back, nullptr);
  auto symbolizer = profiler::Symbolizer::for_process(getpid());
  ASSERT_TRUE(symbolizer) << symbolizer.error().message();
  uint64_t bias = reinterpret_cast<uint64_t>(&jit_loop) - fn->addr;
  profiler::Profile profile(&*symbolizer);
  profiler::Sample s;
  s.ip = back->target + bias;
  // Most recent first: two trips round the loop.
  s.branches = {{back->addr + bias, back->target + bias}, {back->addr + bias, back->target + bias}};
  for (int i = 0; i < 5; ++i) profile.add(s);
  const auto& fp = profile.functions().at({profile.hottest_module(), fn->addr});
  uint64_t from = back->addr - fn->addr, to = back->target - fn->addr;
  EXPECT_EQ(fp.branches.at({from, to}), 10u);
  EXPECT_EQ(fp.traces.at({to, from}), 5u);  // from the older branch's target to the newer one's source
  // And the jit turns them into the back edge's count.
  auto edges = jit::measured_edges(*cfg, fp.branches, fp.traces);
  const jit::Block* tail = cfg->block_at(back->addr);
  double back_edge = 0;
  for (const auto& e : edges)
    if (&cfg->blocks[e.from] == tail && cfg->blocks[e.to].start == back->target) back_edge = e.weight;
  EXPECT_EQ(back_edge, 10.0);
}

// On an assembled function: measured edges alone (no IP samples) decide the layout.
TEST(Lbr, MeasuredEdgesDecideTheLayout) {
  auto a = test::assemble_with_labels(R"(
  test edi, edi
  je hot
cold:
  mov eax, 1
  ret
hot:
  lea eax, [rdi + 2]
  ret
end:
)");
  ASSERT_TRUE(a);
  jit::ModuleImage image;
  image.add(0x401000, a->bytes, true);
  auto cfg = jit::build_cfg(elf::Function{0x401000, a->labels.at("end"), "f", false, 0}, image);
  ASSERT_TRUE(cfg);
  uint64_t je = 2, hot = a->labels.at("hot");
  jit::OffsetPairs branches = {{{je, hot}, 90}}, traces = {{{0, je}, 100}, {{a->labels.at("cold"), 8}, 10}};
  auto edges = jit::measured_edges(*cfg, branches, traces);
  double taken = 0, fall = 0;
  for (const auto& e : edges) {
    if (e.from == 0 && cfg->blocks[e.to].start == 0x401000 + hot) taken = e.weight;
    if (e.from == 0 && cfg->blocks[e.to].start == 0x401000 + a->labels.at("cold")) fall = e.weight;
  }
  EXPECT_EQ(taken, 90.0);
  EXPECT_EQ(fall, 0.0);  // the traces start at the entry and stop at the je: no fall-through crossed
  auto layout = jit::layout_blocks(*cfg, jit::block_counts(*cfg, {}), {}, &edges);
  ASSERT_GE(layout.order.size(), 2u);
  EXPECT_EQ(cfg->blocks[layout.order[1]].start, 0x401000 + hot) << "the measured hot edge falls through";
}

}  // namespace
}  // namespace dyni
