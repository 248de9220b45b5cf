// What exact counts say about a layout, without a PMU (issue 19 item 6): for
// the original code and for a cache laid out by the counts, the ext-TSP
// score, the bytes of code that ran, how many 64-byte lines and 4 KiB pages
// hold 99 % of the executed instructions, and the taken jumps (branches
// that do not fall through; calls and returns are the same in both) per
// 1,000 executed instructions. Pure.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "jit/block_layout.h"
#include "jit/cfg.h"
#include "jit/counting.h"
#include "jit/emitter.h"

namespace dyni::jit {

struct LayoutMetrics {
  double ext_tsp = 0;
  uint64_t instructions = 0;    // executed
  uint64_t taken_jumps = 0;     // executed jumps and jccs that were taken
  uint64_t hot_bytes = 0;       // bytes of the blocks that ran
  std::size_t lines_99 = 0, pages_99 = 0;
  double taken_per_1000() const { return instructions ? 1000.0 * static_cast<double>(taken_jumps) / instructions : 0; }
};

// Per instruction executed: where it is and how often it ran.
struct PlacedCount {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t count = 0;
};

// The block order a copy has, read from its translation table: the blocks
// in the order their first instruction appears, the others not copied.
BlockLayout layout_of_copy(const FunctionCfg& cfg, const EmittedCode& copy);

// One function's part: its instructions placed in the original code, and in
// `copy` (blocks left behind keep their original place).
struct FunctionPlacement {
  std::vector<PlacedCount> original, laid_out;
  double ext_tsp_original = 0, ext_tsp_laid_out = 0;
  uint64_t taken_original = 0, taken_laid_out = 0;
  uint64_t hot_bytes_original = 0, hot_bytes_laid_out = 0;
};
FunctionPlacement place_counts(const FunctionCfg& cfg, const FunctionCounts& counts, const BlockLayout& layout,
                               const EmittedCode& copy);

// The module's figures from every function's placement.
LayoutMetrics metrics_of(const std::vector<FunctionPlacement>& functions, bool laid_out);

// The figures of a module plan's functions that have counts: the original
// code's, then the plan's cache's (dyni-scan --counts, dyni -profile=PID).
struct ModulePlan;
struct ModuleCounts;
// What value sites (counting.h) counted at the indirect calls and jmps of
// the plan's functions: what promoting each site's most called target
// could reach. `to_top`: calls that went to their site's most called
// target; `to_top_copied`: those whose target has a copy in the plan (a
// promoted call would go straight to it); `sites_90`: sites whose top
// target took at least 90 % of their calls.
struct IndirectMetrics {
  std::size_t sites = 0, sites_90 = 0;  // sites that ran
  uint64_t calls = 0, to_top = 0, to_top_copied = 0;
};

// What inlining small leaves could remove at most (issue 20 item 3): calls
// into functions of one block with at most kSmallLeaf instructions before
// their ret, none of which touches rsp, among all the calls into the
// plan's counted functions (their entry blocks' counts). Each such call
// costs a call, a ret and two taken branches that an inlined copy would not.
constexpr std::size_t kSmallLeaf = 3;
struct LeafMetrics {
  std::size_t leaves = 0;  // small leaves that ran
  uint64_t leaf_calls = 0, calls = 0;
};

struct CountMetrics {
  LayoutMetrics original, laid_out;
  IndirectMetrics indirect;
  LeafMetrics leaves;
};
CountMetrics count_metrics(const ModulePlan& plan, const ModuleCounts& counts);
nlohmann::json to_json(const LayoutMetrics& m);
nlohmann::json to_json(const IndirectMetrics& m);

}  // namespace dyni::jit
