// Block layout: fall-through chaining of the heaviest edges, then greedy
// merging of chains by ext-TSP gain; chains by density; unsampled blocks last.
#include "jit/block_layout.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "jit/relocator.h"

namespace dyni::jit {
namespace {

constexpr double kJumpWeight = 0.1;
constexpr double kForwardReach = 1024;
constexpr double kBackwardReach = 640;
constexpr double kHotFraction = 1e-3;  // flow below this share of the peak is not "seen to run"

double edge_score(uint64_t src_end, uint64_t dst_start, double weight) {
  if (src_end == dst_start) return weight;
  if (dst_start > src_end) {
    double d = static_cast<double>(dst_start - src_end);
    return d <= kForwardReach ? weight * kJumpWeight * (1 - d / kForwardReach) : 0;
  }
  double d = static_cast<double>(src_end - dst_start);
  return d <= kBackwardReach ? weight * kJumpWeight * (1 - d / kBackwardReach) : 0;
}

using Chain = std::vector<std::size_t>;

// Chains of hot blocks, merged while merging raises the ext-TSP score.
class ChainMerger {
 public:
  ChainMerger(const std::vector<uint64_t>& sizes, const std::vector<EdgeCount>& edges,
              const std::vector<bool>& hot)
      : sizes_(sizes), edges_(edges), out_(sizes.size()), chain_of_(sizes.size(), kNone),
        pos_(sizes.size(), 0), stamp_(sizes.size(), 0) {
    for (std::size_t e = 0; e < edges.size(); ++e) out_[edges[e].from].push_back(e);
    for (std::size_t b = 0; b < sizes.size(); ++b) {
      if (!hot[b]) continue;
      chain_of_[b] = chains_.size();
      chains_.push_back({b});
    }
    for (const Chain& c : chains_) scores_.push_back(score(c));
  }

  // Joins u's chain and v's chain when u ends one and v starts the other.
  void chain_fall_throughs() {
    std::vector<std::size_t> by_weight(edges_.size());
    std::iota(by_weight.begin(), by_weight.end(), 0);
    std::stable_sort(by_weight.begin(), by_weight.end(),
                     [&](std::size_t a, std::size_t b) { return edges_[a].weight > edges_[b].weight; });
    for (std::size_t e : by_weight) {
      auto [u, v, w] = edges_[e];
      if (w <= 0 || !in_chain(u) || !in_chain(v) || v == 0) continue;
      std::size_t a = chain_of_[u], b = chain_of_[v];
      if (a != b && chains_[a].back() == u && chains_[b].front() == v) merge(a, b, concat(a, b));
    }
  }

  // Repeatedly applies the concatenation of two connected chains with the
  // best positive gain. The entry block's chain always stays in front.
  void merge_by_gain() {
    for (;;) {
      double best_gain = 1e-9;
      std::size_t best_a = kNone, best_b = kNone;
      Chain best;
      for (const EdgeCount& e : edges_) {
        if (e.weight <= 0 || !in_chain(e.from) || !in_chain(e.to)) continue;
        std::size_t a = chain_of_[e.from], b = chain_of_[e.to];
        if (a == b) continue;
        for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
          if (contains_entry(y)) continue;
          Chain c = concat(x, y);
          double gain = score(c) - scores_[x] - scores_[y];
          if (gain > best_gain) best_gain = gain, best_a = x, best_b = y, best = std::move(c);
        }
      }
      if (best_a == kNone) return;
      merge(best_a, best_b, std::move(best));
    }
  }

  std::vector<Chain> chains() const {
    std::vector<Chain> out;
    for (const Chain& c : chains_)
      if (!c.empty()) out.push_back(c);
    return out;
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  bool in_chain(std::size_t b) const { return chain_of_[b] != kNone; }
  bool contains_entry(std::size_t c) const { return !chains_[c].empty() && chains_[c].front() == 0; }

  Chain concat(std::size_t a, std::size_t b) const {
    Chain c = chains_[a];
    c.insert(c.end(), chains_[b].begin(), chains_[b].end());
    return c;
  }

  void merge(std::size_t into, std::size_t from, Chain merged) {
    for (std::size_t b : chains_[from]) chain_of_[b] = into;
    chains_[from].clear();
    chains_[into] = std::move(merged);
    scores_[into] = score(chains_[into]);
    scores_[from] = 0;
  }

  // The ext-TSP score of the edges inside `c`.
  double score(const Chain& c) {
    ++stamp_value_;
    uint64_t at = 0;
    for (std::size_t b : c) pos_[b] = at, at += sizes_[b], stamp_[b] = stamp_value_;
    double s = 0;
    for (std::size_t b : c)
      for (std::size_t e : out_[b])
        if (stamp_[edges_[e].to] == stamp_value_)
          s += edge_score(pos_[b] + sizes_[b], pos_[edges_[e].to], edges_[e].weight);
    return s;
  }

  const std::vector<uint64_t>& sizes_;
  const std::vector<EdgeCount>& edges_;
  std::vector<std::vector<std::size_t>> out_;
  std::vector<std::size_t> chain_of_;
  std::vector<Chain> chains_;
  std::vector<double> scores_;
  std::vector<uint64_t> pos_;
  std::vector<uint64_t> stamp_;
  uint64_t stamp_value_ = 0;
};

// Each block's flow: its own frequency or what its edges carry, whichever is more.
std::vector<double> block_flow(const std::vector<double>& frequency, const std::vector<EdgeCount>& edges) {
  std::vector<double> in(frequency.size(), 0), out(frequency.size(), 0), flow(frequency);
  for (const EdgeCount& e : edges) out[e.from] += e.weight, in[e.to] += e.weight;
  for (std::size_t b = 0; b < flow.size(); ++b) flow[b] = std::max({flow[b], in[b], out[b]});
  return flow;
}

double density(const Chain& c, const std::vector<double>& flow, const std::vector<uint64_t>& sizes) {
  double work = 0, bytes = 0;
  for (std::size_t b : c) work += flow[b] * static_cast<double>(sizes[b]), bytes += static_cast<double>(sizes[b]);
  return bytes > 0 ? work / bytes : 0;
}

// Blocks that carry flow (the entry always): above kHotFraction of the peak.
std::vector<bool> hot_blocks(const std::vector<double>& flow) {
  double peak = *std::max_element(flow.begin(), flow.end());
  std::vector<bool> hot(flow.size());
  for (std::size_t b = 0; b < hot.size(); ++b) hot[b] = b == 0 || (peak > 0 && flow[b] > kHotFraction * peak);
  return hot;
}

// The hot blocks in chains by ext-TSP, the entry's chain first, then by density.
std::vector<Chain> hot_chains(const std::vector<uint64_t>& sizes, const std::vector<EdgeCount>& edges,
                              const std::vector<double>& flow, const std::vector<bool>& hot,
                              const LayoutOptions& options) {
  ChainMerger merger(sizes, edges, hot);
  merger.chain_fall_throughs();
  if (static_cast<std::size_t>(std::count(hot.begin(), hot.end(), true)) <= options.max_blocks_to_merge)
    merger.merge_by_gain();
  std::vector<Chain> chains = merger.chains();
  std::stable_sort(chains.begin(), chains.end(), [&](const Chain& a, const Chain& b) {
    if ((a.front() == 0) != (b.front() == 0)) return a.front() == 0;
    return density(a, flow, sizes) > density(b, flow, sizes);
  });
  return chains;
}

}  // namespace

std::vector<uint64_t> relocated_block_sizes(const FunctionCfg& cfg) {
  std::vector<uint64_t> sizes;
  for (const Block& b : cfg.blocks) {
    uint64_t n = 0;
    for (std::size_t i = b.first; i < b.first + b.count; ++i) n += relocated_length(cfg.instructions[i]);
    sizes.push_back(n);
  }
  return sizes;
}

double ext_tsp_score(const std::vector<uint64_t>& block_sizes, const std::vector<EdgeCount>& edges,
                     const std::vector<std::size_t>& order) {
  std::vector<int64_t> pos(block_sizes.size(), -1);
  uint64_t at = 0;
  for (std::size_t b : order) pos[b] = static_cast<int64_t>(at), at += block_sizes[b];
  double s = 0;
  for (const EdgeCount& e : edges)
    if (pos[e.from] >= 0 && pos[e.to] >= 0)
      s += edge_score(static_cast<uint64_t>(pos[e.from]) + block_sizes[e.from], static_cast<uint64_t>(pos[e.to]),
                      e.weight);
  return s;
}

BlockLayout original_layout(const FunctionCfg& cfg) {
  BlockLayout l;
  l.order.resize(cfg.blocks.size());
  std::iota(l.order.begin(), l.order.end(), 0);
  l.copied.assign(cfg.blocks.size(), true);
  return l;
}

void mark_loop_tops(const std::vector<EdgeCount>& edges, const std::vector<uint64_t>& block_counts,
                    unsigned alignment, BlockLayout& layout) {
  if (!alignment) return;
  std::vector<std::size_t> position(block_counts.size(), SIZE_MAX);
  for (std::size_t k = 0; k < layout.order.size(); ++k) position[layout.order[k]] = k;
  std::vector<double> back(block_counts.size(), 0);  // edges from a block at or after the target
  for (const EdgeCount& e : edges)
    if (position[e.from] != SIZE_MAX && position[e.to] != SIZE_MAX && position[e.from] >= position[e.to])
      back[e.to] += e.weight;
  layout.loop_top.assign(block_counts.size(), false);
  layout.loop_alignment = alignment;
  for (std::size_t b = 0; b < block_counts.size(); ++b) {
    const double entered = static_cast<double>(block_counts[b]) - back[b];
    // The entry block starts the copy, which is already aligned.
    layout.loop_top[b] = position[b] != 0 && position[b] != SIZE_MAX && back[b] >= kLoopTopMinimum &&
                         back[b] >= 2 * std::max(entered, 1.0);
  }
}

// The stress layout (LayoutOptions::shuffle_seed): `alignment` marks a
// random third of the blocks after the first as loop tops.
BlockLayout shuffled_layout(const FunctionCfg& cfg, uint64_t seed, bool leave_some, unsigned alignment) {
  std::mt19937_64 rng(seed ^ cfg.start);
  BlockLayout l = original_layout(cfg);
  std::shuffle(l.order.begin() + 1, l.order.end(), rng);
  if (alignment) {
    l.loop_alignment = alignment;
    l.loop_top.assign(cfg.blocks.size(), false);
    for (std::size_t k = 1; k < l.order.size(); ++k) l.loop_top[l.order[k]] = rng() % 3 == 0;
  }
  if (!leave_some) return l;
  std::vector<std::size_t> kept = {0};
  for (std::size_t k = 1; k < l.order.size(); ++k) {
    if (rng() % 4 == 0) l.copied[l.order[k]] = false;
    else kept.push_back(l.order[k]);
  }
  l.order = std::move(kept);
  return l;
}

BlockLayout layout_blocks(const FunctionCfg& cfg, const std::vector<BlockCount>& counts,
                          const LayoutOptions& options, const std::vector<EdgeCount>* measured) {
  if (options.shuffle_seed)
    return shuffled_layout(cfg, options.shuffle_seed, options.cold == ColdBlocks::LeaveInOriginal,
                           options.loop_alignment);
  std::vector<double> frequency = block_frequencies(cfg, counts);
  bool use_measured = measured && std::any_of(measured->begin(), measured->end(), [](auto& e) { return e.weight > 0; });
  std::vector<EdgeCount> edges = use_measured ? *measured : infer_edges(cfg, frequency);
  // Measured edges are in their own unit (branch records): flow then comes from them alone.
  std::vector<double> flow = block_flow(use_measured ? std::vector<double>(frequency.size(), 0.0) : frequency, edges);
  std::vector<uint64_t> sizes = relocated_block_sizes(cfg);
  std::vector<bool> hot = hot_blocks(flow);
  std::vector<Chain> chains = hot_chains(sizes, edges, flow, hot, options);

  double peak_rate = *std::max_element(frequency.begin(), frequency.end());
  auto proven_cold = [&](std::size_t b) {
    if (options.cold != ColdBlocks::LeaveInOriginal || counts[b].samples != 0) return false;
    double rate_high = counts[b].high / static_cast<double>(cfg.blocks[b].count);
    return rate_high < options.cold_fraction * peak_rate;
  };
  BlockLayout l;
  l.copied.assign(cfg.blocks.size(), false);
  for (const Chain& c : chains)
    for (std::size_t b : c) l.order.push_back(b), l.copied[b] = true;
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
    if (hot[b] || proven_cold(b)) continue;
    l.order.push_back(b);
    l.copied[b] = true;
  }
  return l;
}

BlockLayout layout_by_counts(const FunctionCfg& cfg, const FunctionCounts& counts, const LayoutOptions& options) {
  std::vector<double> flow(counts.blocks.begin(), counts.blocks.end());
  std::vector<bool> hot = hot_blocks(flow);
  std::vector<Chain> chains = hot_chains(relocated_block_sizes(cfg), counts.edges, flow, hot, options);
  BlockLayout l;
  l.copied.assign(cfg.blocks.size(), false);
  for (const Chain& c : chains)
    for (std::size_t b : c) l.order.push_back(b), l.copied[b] = true;
  for (bool ran : {true, false})
    for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
      if (hot[b] || (counts.blocks[b] > 0) != ran) continue;
      if (!ran && options.cold == ColdBlocks::LeaveInOriginal) continue;  // never ran: stays behind
      l.order.push_back(b);
      l.copied[b] = true;
    }
  mark_loop_tops(counts.edges, counts.blocks, options.loop_alignment, l);
  return l;
}

}  // namespace dyni::jit
