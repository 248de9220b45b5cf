// Orders hot functions by call-graph affinity (C3, as in HHVM's hfsort and
// BOLT's -reorder-functions=cdsort's ancestor): each function, hottest first,
// joins the cluster of its most frequent caller, placed right after it, so a
// hot call path shares few pages; clusters are then laid out by density.
#pragma once

#include <cstdint>
#include <vector>

namespace dyni::jit {

struct FunctionNode {
  uint64_t id = 0;      // e.g. the function's link-time address
  uint64_t size = 0;    // bytes
  uint64_t samples = 0;
};

struct CallEdge {
  uint64_t caller = 0, callee = 0;
  uint64_t weight = 0;  // samples attributed to this call
};

struct OrderOptions {
  uint64_t max_cluster_bytes = 1 << 20;  // never grow a cluster beyond this
  double min_density_ratio = 0.125;      // do not append hot code after much colder code
};

// The ids of `nodes` in layout order (every node exactly once).
std::vector<uint64_t> order_functions(const std::vector<FunctionNode>& nodes,
                                      const std::vector<CallEdge>& edges,
                                      const OrderOptions& options = {});

}  // namespace dyni::jit
