// The stability criterion: total-variation distance between sample distributions.
#include <gtest/gtest.h>

#include "profiler/recorder.h"

namespace dyni::profiler {
namespace {

TEST(DistributionDistance, IdenticalShapesAreZeroDisjointAreOne) {
  std::map<FunctionKey, uint64_t> a = {{{0, 0x10}, 60}, {{0, 0x20}, 40}};
  std::map<FunctionKey, uint64_t> twice = {{{0, 0x10}, 120}, {{0, 0x20}, 80}};
  std::map<FunctionKey, uint64_t> other = {{{1, 0x10}, 5}};
  EXPECT_DOUBLE_EQ(distribution_distance(a, 100, twice, 200), 0.0);
  EXPECT_DOUBLE_EQ(distribution_distance(a, 100, other, 5), 1.0);
  EXPECT_DOUBLE_EQ(distribution_distance(a, 100, {}, 0), 1.0);
}

TEST(DistributionDistance, MeasuresTheShiftedShare) {
  std::map<FunctionKey, uint64_t> a = {{{0, 0x10}, 60}, {{0, 0x20}, 40}};
  std::map<FunctionKey, uint64_t> b = {{{0, 0x10}, 50}, {{0, 0x20}, 50}};
  EXPECT_NEAR(distribution_distance(a, 100, b, 100), 0.10, 1e-12);
}

}  // namespace
}  // namespace dyni::profiler
