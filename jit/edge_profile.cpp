// Edge frequencies by iterative proportional fitting of block frequencies.
#include "jit/edge_profile.h"

#include <algorithm>
#include <map>

namespace dyni::jit {
namespace {

constexpr int kRounds = 8;
constexpr double kPrior = 1e-3;  // gives an unsampled successor a small share

void scale(std::vector<EdgeCount>& edges, const std::vector<std::size_t>& ids, double want) {
  double have = 0;
  for (std::size_t e : ids) have += edges[e].weight;
  if (have <= 0) return;
  for (std::size_t e : ids) edges[e].weight *= want / have;
}

}  // namespace

std::vector<double> block_frequencies(const FunctionCfg& cfg, const std::vector<BlockCount>& counts) {
  std::vector<double> f(cfg.blocks.size(), 0.0);
  for (std::size_t i = 0; i < f.size() && i < counts.size(); ++i)
    f[i] = static_cast<double>(counts[i].samples) / static_cast<double>(cfg.blocks[i].count);
  return f;
}

// A block with no samples has an unknown frequency, not zero: its constraints
// are left out of the fit and its edges carry what its neighbours imply
// (the only successor of a hot block is as hot as it).
std::vector<EdgeCount> infer_edges(const FunctionCfg& cfg, const std::vector<double>& frequency) {
  std::map<uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < cfg.blocks.size(); ++i) index[cfg.blocks[i].start] = i;
  std::vector<EdgeCount> edges;
  std::vector<std::vector<std::size_t>> out(cfg.blocks.size()), in(cfg.blocks.size());
  for (std::size_t u = 0; u < cfg.blocks.size(); ++u) {
    double total = 0;
    for (uint64_t s : cfg.blocks[u].successors) total += frequency[index.at(s)] + kPrior;
    for (uint64_t s : cfg.blocks[u].successors) {
      std::size_t v = index.at(s);
      out[u].push_back(edges.size());
      in[v].push_back(edges.size());
      edges.push_back({u, v, frequency[u] * (frequency[v] + kPrior) / total});
    }
  }
  // Alternate: the inflow of each known block (but the entry, which callers
  // also enter) to its frequency, then the outflow of each known block that
  // cannot leave the function otherwise.
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t v = 1; v < cfg.blocks.size(); ++v)
      if (frequency[v] > 0) scale(edges, in[v], frequency[v]);
    for (std::size_t u = 0; u < cfg.blocks.size(); ++u)
      if (frequency[u] > 0 && !cfg.blocks[u].exits) scale(edges, out[u], frequency[u]);
  }
  return edges;
}

std::vector<EdgeCount> measured_edges(const FunctionCfg& cfg, const OffsetPairs& branches, const OffsetPairs& traces) {
  std::map<std::pair<std::size_t, std::size_t>, double> count;
  std::map<uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < cfg.blocks.size(); ++i) index[cfg.blocks[i].start] = i;
  auto successor = [&](std::size_t u, uint64_t addr) {
    const auto& succ = cfg.blocks[u].successors;
    return std::find(succ.begin(), succ.end(), addr) != succ.end();
  };
  for (const auto& [key, n] : branches) {
    uint64_t from = cfg.start + key.first, to = cfg.start + key.second;
    const Block* u = cfg.block_at(from);
    if (!u || cfg.instructions[u->first + u->count - 1].addr != from || !successor(u - cfg.blocks.data(), to)) continue;
    count[{static_cast<std::size_t>(u - cfg.blocks.data()), index.at(to)}] += static_cast<double>(n);
  }
  for (const auto& [key, n] : traces) {
    const Block* a = cfg.block_at(cfg.start + key.first);
    const Block* b = cfg.block_at(cfg.start + key.second);
    if (!a || !b || b < a) continue;
    for (const Block* x = a; x < b; ++x) {
      if (x->end != (x + 1)->start || !successor(x - cfg.blocks.data(), (x + 1)->start)) break;  // not straight
      count[{static_cast<std::size_t>(x - cfg.blocks.data()), static_cast<std::size_t>(x + 1 - cfg.blocks.data())}] +=
          static_cast<double>(n);
    }
  }
  std::vector<EdgeCount> edges;
  for (std::size_t u = 0; u < cfg.blocks.size(); ++u)
    for (uint64_t s : cfg.blocks[u].successors) {
      auto it = count.find({u, index.at(s)});
      edges.push_back({u, index.at(s), it == count.end() ? 0.0 : it->second});
    }
  return edges;
}

}  // namespace dyni::jit
