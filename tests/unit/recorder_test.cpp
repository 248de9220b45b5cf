// The stability criterion: how well the hot set so far predicts new samples.
#include <gtest/gtest.h>

#include "profiler/recorder.h"

namespace dyni::profiler {
namespace {

TEST(HotSetCoverage, NewSamplesInKnownHotCodeCoverFully) {
  std::map<FunctionKey, uint64_t> before = {{{0, 0x10}, 60}, {{0, 0x20}, 40}};
  std::map<FunctionKey, uint64_t> now = {{{0, 0x10}, 90}, {{0, 0x20}, 70}};
  EXPECT_DOUBLE_EQ(hot_set_coverage(before, now, 0.99), 1.0);
}

TEST(HotSetCoverage, SamplesInNewCodeLowerIt) {
  std::map<FunctionKey, uint64_t> before = {{{0, 0x10}, 60}, {{0, 0x20}, 40}};
  std::map<FunctionKey, uint64_t> now = {{{0, 0x10}, 90}, {{0, 0x20}, 40}, {{1, 0x30}, 10}};
  EXPECT_DOUBLE_EQ(hot_set_coverage(before, now, 0.99), 0.75);  // 30 of 40 new samples
  // With a 50 % hot set only the hottest function counts.
  std::map<FunctionKey, uint64_t> spread = {{{0, 0x10}, 70}, {{0, 0x20}, 50}};
  EXPECT_DOUBLE_EQ(hot_set_coverage(before, spread, 0.5), 10.0 / 20.0);
  EXPECT_DOUBLE_EQ(hot_set_coverage(before, before, 0.99), 0.0) << "no new samples";
}

}  // namespace
}  // namespace dyni::profiler

namespace dyni::profiler {
namespace {

// Cumulative counts after `rounds` rounds in which each function got `per_round[k]` samples.
std::map<FunctionKey, uint64_t> after(int rounds, const std::vector<uint64_t>& per_round, int first_id = 0) {
  std::map<FunctionKey, uint64_t> c;
  for (std::size_t k = 0; k < per_round.size(); ++k)
    c[{0, static_cast<uint64_t>(first_id + k)}] = per_round[k] * static_cast<uint64_t>(rounds);
  return c;
}

TEST(StabilityCheck, AStationaryProfileBecomesStableAfterTwoCalmWindows) {
  RecorderOptions o;
  o.min_samples = 0;
  StabilityCheck check(o);
  std::vector<uint64_t> weights = {200, 100, 60, 30, 10};  // 400 samples a round
  EXPECT_FALSE(check.update(after(1, weights), 400));  // first window: only a baseline
  EXPECT_FALSE(check.update(after(2, weights), 800));  // one calm window
  EXPECT_DOUBLE_EQ(check.coverage(), 1.0);
  EXPECT_TRUE(check.update(after(3, weights), 1200));  // two
}

TEST(StabilityCheck, NewCodeKeepsItUnstable) {
  RecorderOptions o;
  o.min_samples = 0;
  StabilityCheck check(o);
  std::map<FunctionKey, uint64_t> counts;
  uint64_t total = 0;
  for (int round = 0; round < 10; ++round) {  // each round, half the samples land in code never seen before
    counts[{0, 1}] += 200;
    counts[{1, static_cast<uint64_t>(100 + round)}] += 200;
    total += 400;
    EXPECT_FALSE(check.update(counts, total)) << round;
  }
  EXPECT_NEAR(check.coverage(), 0.5, 0.01);
}

TEST(StabilityCheck, WaitsForEnoughFreshSamplesAndMinSamples) {
  RecorderOptions o;
  o.min_samples = 2000;
  StabilityCheck check(o);
  std::vector<uint64_t> weights = {300, 100};
  for (int round = 1; round <= 4; ++round) EXPECT_FALSE(check.update(after(round, weights), 400u * round));
  EXPECT_FALSE(check.update(after(4, weights), 1700)) << "fewer than min_fresh_samples since the last window";
  EXPECT_TRUE(check.update(after(5, weights), 2000));
}

}  // namespace
}  // namespace dyni::profiler
