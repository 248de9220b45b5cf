// Flow conservation over a CFG: the graph, and propagation of known counts.
#include "jit/count_flow.h"

#include <algorithm>

namespace dyni::jit {

namespace {

// Whether a counting copy dispatches through its own table (emitter.cpp):
// a rebuildable table read through a base register. Otherwise the copy's
// jump goes to the original code, and the copies of the targets are not
// where the flow goes.
bool dispatches_in_copy(const FunctionCfg& cfg, const Instruction& jump) {
  for (const JumpTable& t : cfg.tables) {
    if (t.jump_addr != jump.addr) continue;
    if (!t.rebuildable) return false;
    auto load = std::find_if(cfg.instructions.begin(), cfg.instructions.end(),
                             [&](const Instruction& in) { return in.addr == t.load_addr; });
    return load != cfg.instructions.end() && load->memory() && load->memory()->base != ZYDIS_REGISTER_NONE;
  }
  return false;
}

}  // namespace

FlowGraph flow_graph(const FunctionCfg& cfg) {
  FlowGraph g;
  const std::size_t n = cfg.blocks.size();
  g.in.resize(n), g.out.resize(n), g.fall_edge.assign(n, kOutside);
  auto add = [&](std::size_t from, std::size_t to, bool table) {
    g.edges.push_back({from, to, table});
    g.out[from].push_back(g.edges.size() - 1);
    if (to != kOutside) g.in[to].push_back(g.edges.size() - 1);
    return g.edges.size() - 1;
  };
  for (std::size_t k = 0; k < n; ++k) {
    const Block& b = cfg.blocks[k];
    const Instruction& last = cfg.instructions[b.first + b.count - 1];
    const bool table = last.flow == Flow::IndirectBranch;
    if (table && !dispatches_in_copy(cfg, last)) {
      add(k, kOutside, false);  // the copy's dispatch goes to the original code
      continue;
    }
    for (uint64_t s : b.successors) {
      const std::size_t to = static_cast<std::size_t>(cfg.block_at(s) - cfg.blocks.data());
      const std::size_t e = add(k, to, table);
      if (last.flow == Flow::CondBranch && s == last.end() && !(last.has_target && last.target == last.end()))
        g.fall_edge[k] = e;
    }
    // A call may not return (a noreturn callee, or an exception): the
    // flow past it is not the flow into it.
    const bool call_ends = last.flow == Flow::Call || last.flow == Flow::IndirectCall;
    if (b.exits || call_ends) {
      const std::size_t e = add(k, kOutside, false);
      // The fall-through leaves the function, and the branch's target is in it.
      const bool target_inside = last.has_target && cfg.block_at(last.target) && last.target >= cfg.start &&
                                 last.target < cfg.end;
      if (last.flow == Flow::CondBranch && target_inside && !cfg.block_at(last.end())) g.fall_edge[k] = e;
    }
  }
  return g;
}

namespace {

// sum = Σ terms: when all but one of (sum, terms) are known, the last one.
// Returns the edge it found, `sum_found` when it found the sum, or nothing.
constexpr std::size_t kNothing = static_cast<std::size_t>(-1), kSum = kNothing - 1;
std::size_t solve(std::optional<int64_t>& sum, const std::vector<std::size_t>& terms,
                  std::vector<std::optional<int64_t>>& edges) {
  int64_t known = 0;
  std::size_t unknown = 0, which = 0;
  for (std::size_t e : terms) {
    if (edges[e]) known += *edges[e];
    else ++unknown, which = e;
  }
  if (sum && unknown == 1) {
    edges[which] = *sum - known;
    return which;
  }
  if (!sum && unknown == 0) {
    sum = known;
    return kSum;
  }
  return kNothing;
}

}  // namespace

// A worklist of blocks: each time a value becomes known, the blocks whose
// equations it is in are looked at again.
void propagate(const FlowGraph& g, FlowValues& v) {
  const std::size_t n = g.in.size();
  std::vector<std::size_t> work;
  std::vector<bool> queued(n, true);
  for (std::size_t k = n; k-- > 0;) work.push_back(k);
  auto again = [&](std::size_t k) {
    if (k != kOutside && !queued[k]) queued[k] = true, work.push_back(k);
  };
  auto found = [&](std::size_t k, std::size_t what) {
    if (what == kNothing) return;
    again(k);
    if (what != kSum) again(g.edges[what].from), again(g.edges[what].to);
  };
  while (!work.empty()) {
    const std::size_t k = work.back();
    work.pop_back();
    queued[k] = false;
    if (!g.out[k].empty()) found(k, solve(v.blocks[k], g.out[k], v.edges));
    // Calls enter the entry, and a block with no in-edge is entered some
    // other way (a landing pad): no in-equation for either.
    if (k != 0 && !g.in[k].empty()) found(k, solve(v.blocks[k], g.in[k], v.edges));
  }
}

bool fully_known(const FlowGraph& g, const FlowValues& v) {
  if (!std::all_of(v.blocks.begin(), v.blocks.end(), [](const auto& c) { return c.has_value(); })) return false;
  for (std::size_t e = 0; e < g.edges.size(); ++e)
    if (!v.edges[e] && !g.edges[e].table && g.edges[e].to != kOutside) return false;
  return true;
}

}  // namespace dyni::jit
