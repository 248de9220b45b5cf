// Profile-guided block order for one function (ext-TSP objective, as in BOLT
// and LLVM's code layout): hot edges become fall-throughs, short jumps are
// preferred to long ones, loops stay compact. Blocks nobody was seen to run go
// after the hot ones. Unsampled is not proven cold (DESIGN.md §7), so by
// default every block is still copied; leaving a block in the original code
// (branches to it go back to the same instruction there) is a policy for
// functions sampled well enough to be sure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "jit/block_profile.h"
#include "jit/cfg.h"
#include "jit/counting.h"
#include "jit/edge_profile.h"

namespace dyni::jit {

enum class ColdBlocks {
  CopyLast,         // copy every block; unsampled ones after the hot code
  LeaveInOriginal,  // blocks proven cold stay behind (see cold_fraction)
};

struct LayoutOptions {
  ColdBlocks cold = ColdBlocks::LeaveInOriginal;
  // A block is proven cold when it has no samples, no inferred flow, and even
  // the upper end of its 95 % interval (3.69 samples over its instructions)
  // is below this fraction of the hottest block's rate: it runs at most ~1 %
  // as often. With sparse samples (this machine: 250 Hz cpu-clock) almost
  // nothing qualifies, so almost everything is copied; with dense samples
  // only truly cold code is left behind.
  double cold_fraction = 0.01;
  std::size_t max_blocks_to_merge = 400;        // beyond: fall-through chaining only (time bound)
  // Stress mode for tests and `dyni-scan --shuffle`: a random block order
  // (entry first), and with LeaveInOriginal a random quarter of the blocks
  // left behind, so every bridging path of the emitter runs on real code.
  uint64_t shuffle_seed = 0;
  // Loop tops on this boundary (16, 32 or 64 bytes; 0: none): the first
  // block of a hot loop in the layout starts a fetch block, as a compiler's
  // `.p2align` puts it. By counts only (layout_by_counts); the stress
  // layout marks random blocks, so every padding path of the emitter runs.
  // 32 on mariadbd (AMD EPYC Zen 4, KVM): user CPU per query x0.750 and
  // x0.742 of the original against x0.789 and x0.750 with none, each pair's
  // intervals overlapping (docs/levers.md); kept, as compilers align loops.
  unsigned loop_alignment = 32;
};

struct BlockLayout {
  std::vector<std::size_t> order;  // copied blocks in cache order; the entry block first
  std::vector<bool> copied;        // per block of the CFG
  // Per block (empty: none): a loop top, whose copy the emitter puts on a
  // `loop_alignment` boundary (emitter.h, Translation::Padding).
  std::vector<bool> loop_top;
  unsigned loop_alignment = 0;
};

// A loop top: a block that a later block of `layout` (or itself) jumps back
// to at least twice as often as it is entered otherwise, in a loop that ran
// (the backward edges' count, at least kLoopTopMinimum). Marks them in
// `layout` for `alignment` (0: none).
constexpr uint64_t kLoopTopMinimum = 64;
void mark_loop_tops(const std::vector<EdgeCount>& edges, const std::vector<uint64_t>& block_counts,
                    unsigned alignment, BlockLayout& layout);

// Blocks by exact counts (counting.h): ext-TSP on the measured edges, hot
// chains first; blocks that ran too rarely to chain follow; a block that
// never ran while counting stays in the original code with
// ColdBlocks::LeaveInOriginal (branches to it go back there), else goes last.
// The entry block is always copied.
BlockLayout layout_by_counts(const FunctionCfg& cfg, const FunctionCounts& counts, const LayoutOptions& options = {});

// Every block, in address order (what the original code does).
BlockLayout original_layout(const FunctionCfg& cfg);

// `measured`: edge counts from LBR (edge_profile.h), used instead of the
// inferred ones when given and not all zero.
BlockLayout layout_blocks(const FunctionCfg& cfg, const std::vector<BlockCount>& counts,
                          const LayoutOptions& options = {}, const std::vector<EdgeCount>* measured = nullptr);

// The stress layout of LayoutOptions::shuffle_seed.
BlockLayout shuffled_layout(const FunctionCfg& cfg, uint64_t seed, bool leave_some, unsigned alignment = 0);

// The ext-TSP score of `order` (higher is better): every edge scores its
// weight if it falls through, a tenth of it scaled down by distance for a
// forward jump up to 1024 bytes or a backward jump up to 640 bytes.
double ext_tsp_score(const std::vector<uint64_t>& block_sizes, const std::vector<EdgeCount>& edges,
                     const std::vector<std::size_t>& order);

// Block sizes once relocated (layout works on the bytes the cache will hold).
std::vector<uint64_t> relocated_block_sizes(const FunctionCfg& cfg);

}  // namespace dyni::jit
