// C3 function ordering: hot call paths end up adjacent, caller first.
#include <gtest/gtest.h>

#include <algorithm>

#include "jit/function_order.h"

namespace dyni::jit {
namespace {

std::size_t pos(const std::vector<uint64_t>& order, uint64_t id) {
  return static_cast<std::size_t>(std::find(order.begin(), order.end(), id) - order.begin());
}

TEST(FunctionOrder, HotCallChainIsContiguousCallerFirst) {
  // A calls B (hot), B calls C; D is hot but unrelated; E is cold.
  std::vector<FunctionNode> nodes = {{1, 100, 500}, {2, 200, 900}, {3, 50, 300}, {4, 100, 800}, {5, 4000, 1}};
  std::vector<CallEdge> edges = {{1, 2, 800}, {2, 3, 290}, {5, 2, 5}};
  auto order = order_functions(nodes, edges);
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(pos(order, 2), pos(order, 1) + 1);  // B right after its hottest caller A
  EXPECT_EQ(pos(order, 3), pos(order, 2) + 1);  // C right after B
  EXPECT_EQ(order.back(), 5u) << "the cold, large function goes last";
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint64_t>{1, 2, 3, 4, 5})) << "every function exactly once";
}

TEST(FunctionOrder, RespectsTheClusterSizeLimitAndDensity) {
  std::vector<FunctionNode> nodes = {{1, 600, 600}, {2, 600, 600}, {3, 10, 1000}, {4, 100000, 10}};
  std::vector<CallEdge> edges = {{1, 2, 500}, {4, 3, 900}};
  OrderOptions small;
  small.max_cluster_bytes = 1000;
  auto order = order_functions(nodes, edges, small);
  // 1 and 2 would make 1200 bytes > 1000: not merged. 3 is far denser than its
  // caller 4: not appended after it, and it leads the layout.
  EXPECT_EQ(order.front(), 3u);
  EXPECT_NE(pos(order, 3), pos(order, 4) + 1);
  auto unlimited = order_functions(nodes, edges);
  EXPECT_EQ(pos(unlimited, 2), pos(unlimited, 1) + 1);
}

TEST(FunctionOrder, IgnoresSelfCallsAndUnknownFunctions) {
  std::vector<FunctionNode> nodes = {{1, 10, 10}, {2, 10, 20}};
  auto order = order_functions(nodes, {{1, 1, 100}, {9, 2, 100}, {2, 9, 100}});
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 1}));
}

}  // namespace
}  // namespace dyni::jit
