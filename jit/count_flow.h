// Which counts follow from which: flow conservation over a function's CFG,
// so that a counting copy counts only where a count cannot be derived
// (counting.h, plan_counters) and the counts back fill in the rest
// (counts_from). Pure.
//
// The flow graph has a node per block and an edge per in-function
// successor, plus one edge to "outside" from each block that exits (ret,
// tail call, a branch or fall-through out of the function, a stop) or ends
// in a call (which may not return). A jump table that the copy does not
// rebuild dispatches to the original code: its block's edges are one edge
// outside. Every
// block but the entry is entered only through its in-edges, and leaves only
// through its out-edges:
//     count(block) = sum of its in-edges    (not the entry: calls enter it;
//                                            not a block with no in-edge)
//     count(block) = sum of its out-edges
// An exception thrown through a call, or a second return from setjmp,
// breaks these for that one run; a count derived across it is off by those
// runs. Counts only guide the layout: a wrong count makes a copy slower,
// never wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "jit/cfg.h"

namespace dyni::jit {

constexpr std::size_t kOutside = static_cast<std::size_t>(-1);

struct FlowGraph {
  struct Edge {
    std::size_t from = 0, to = kOutside;  // block indices; kOutside: leaves the function
    bool table = false;                   // one of a jump table's (its count may stay unknown)
  };
  std::vector<Edge> edges;
  std::vector<std::vector<std::size_t>> in, out;  // edge indices, per block
  // Per block ending in a conditional branch: the edge its fall-through
  // takes (to the next block, or outside when the next is not the
  // function's and the branch's target is); kOutside when none is its own.
  std::vector<std::size_t> fall_edge;
};

FlowGraph flow_graph(const FunctionCfg& cfg);

// Known values in, every value that follows out (left unknown where none
// does). Values are signed: racy counts may disagree, and a derived count
// may then come out negative (callers clamp).
struct FlowValues {
  std::vector<std::optional<int64_t>> blocks, edges;
};
void propagate(const FlowGraph& g, FlowValues& v);

// Whether every block's count and every edge's but a jump table's follow.
bool fully_known(const FlowGraph& g, const FlowValues& v);

}  // namespace dyni::jit
