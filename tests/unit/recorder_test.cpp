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
