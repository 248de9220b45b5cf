// Block and edge frequencies of a function from IP samples alone (no LBR on
// VMs): a block's frequency is its samples per instruction (time spent ≈
// executions × length), and edge frequencies are inferred from those by
// iterative proportional fitting on the CFG, so that each block's inflow and
// outflow match its frequency as far as the counts allow (flow conservation).
// Where a PMU gives branch stacks, measured edge counts replace the inference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "jit/block_profile.h"
#include "jit/cfg.h"

namespace dyni::jit {

struct EdgeCount {
  std::size_t from = 0, to = 0;  // block indices
  double weight = 0;             // executions, in units of block frequency
};

// Samples per instruction for every block of `cfg`.
std::vector<double> block_frequencies(const FunctionCfg& cfg, const std::vector<BlockCount>& counts);

// Every in-function CFG edge with an inferred frequency.
std::vector<EdgeCount> infer_edges(const FunctionCfg& cfg, const std::vector<double>& frequency);

// Offsets from the function's start → count (jit/module_profile.h).
using OffsetPairs = std::map<std::pair<uint64_t, uint64_t>, uint64_t>;

// Every in-function CFG edge with its count measured from LBR branch stacks:
// taken branches count where they leave a block for a successor; a
// straight-line trace counts every fall-through it crosses. Branches that
// match no CFG edge (calls, returns, stale records) are ignored.
std::vector<EdgeCount> measured_edges(const FunctionCfg& cfg, const OffsetPairs& branches, const OffsetPairs& traces);

}  // namespace dyni::jit
