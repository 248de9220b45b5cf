// Block counts for a function's CFG from the profiler's per-instruction
// histogram, with how sure each count is. IP samples are sparse: a block with
// no samples is *unknown*, not cold (offline BOLT lost 5 % on mariadbd here by
// treating such blocks as cold), so each count carries a 95 % interval on the
// block's rate and layout can stay conservative where the interval is wide.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "jit/cfg.h"

namespace dyni::jit {

struct BlockCount {
  uint64_t samples = 0;
  double low = 0, high = 0;  // 95 % interval on the expected samples (Poisson)
  bool known_hot() const { return low > 0; }
};

// `by_offset`: samples per offset from the function's start (profiler/profile.h).
std::vector<BlockCount> block_counts(const FunctionCfg& cfg, const std::map<uint64_t, uint64_t>& by_offset);

// Exact-enough 95 % Poisson interval for an observed count n.
std::pair<double, double> poisson_interval_95(uint64_t n);

}  // namespace dyni::jit
