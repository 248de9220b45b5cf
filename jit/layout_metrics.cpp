// Placing counted instructions in the original code and in a copy, and the
// figures of either placement.
#include "jit/layout_metrics.h"

#include <algorithm>
#include <map>
#include <set>

#include "jit/module_counts.h"
#include "jit/pipeline.h"

namespace dyni::jit {
namespace {

// Whether an edge from block `from` to block `to` falls through when the
// copied blocks run in `order` (from's last instruction a jmp to the next
// block is dropped, but in a block that is only that jmp).
bool falls_through(const FunctionCfg& cfg, const std::vector<std::size_t>& order, const std::vector<std::size_t>& pos,
                   std::size_t from, std::size_t to) {
  if (pos[from] == SIZE_MAX || pos[to] == SIZE_MAX || pos[from] + 1 >= order.size() || order[pos[from] + 1] != to)
    return false;
  const Block& b = cfg.blocks[from];
  return cfg.instructions[b.first + b.count - 1].flow != Flow::Branch || b.count > 1;
}

std::vector<std::size_t> positions(std::size_t blocks, const std::vector<std::size_t>& order) {
  std::vector<std::size_t> pos(blocks, SIZE_MAX);
  for (std::size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
  return pos;
}

uint64_t taken(const FunctionCfg& cfg, const FunctionCounts& counts, const BlockLayout& layout) {
  std::vector<std::size_t> pos = positions(cfg.blocks.size(), layout.order);
  BlockLayout original = original_layout(cfg);
  std::vector<std::size_t> original_pos = positions(cfg.blocks.size(), original.order);
  uint64_t n = 0;
  for (const EdgeCount& e : counts.edges) {
    // An edge between blocks left in the original code runs there.
    bool here = layout.copied[e.from] && layout.copied[e.to];
    bool falls = here ? falls_through(cfg, layout.order, pos, e.from, e.to)
                      : !layout.copied[e.from] && !layout.copied[e.to] &&
                            falls_through(cfg, original.order, original_pos, e.from, e.to);
    if (!falls) n += static_cast<uint64_t>(e.weight);
  }
  return n;
}

// The fewest 2^shift-byte units holding 99 % of the executed instructions.
std::size_t units_for_99(const std::vector<FunctionPlacement>& functions, bool laid_out, unsigned shift) {
  std::map<uint64_t, uint64_t> by_unit;
  uint64_t total = 0;
  for (const FunctionPlacement& f : functions)
    for (const PlacedCount& p : laid_out ? f.laid_out : f.original) by_unit[p.addr >> shift] += p.count, total += p.count;
  std::vector<uint64_t> units;
  for (const auto& [unit, n] : by_unit) units.push_back(n);
  std::sort(units.rbegin(), units.rend());
  uint64_t covered = 0;
  std::size_t k = 0;
  while (k < units.size() && static_cast<double>(covered) < 0.99 * static_cast<double>(total)) covered += units[k++];
  return k;
}

}  // namespace

BlockLayout layout_of_copy(const FunctionCfg& cfg, const EmittedCode& copy) {
  BlockLayout l;
  l.copied.assign(cfg.blocks.size(), false);
  for (const TranslationEntry& t : copy.translation) {
    if (t.kind == Translation::Jump || is_counter(t.kind)) continue;
    const Block* b = cfg.block_at(t.original_addr);
    if (!b) continue;
    std::size_t k = static_cast<std::size_t>(b - cfg.blocks.data());
    if (!l.copied[k]) l.copied[k] = true, l.order.push_back(k);
  }
  return l;
}

FunctionPlacement place_counts(const FunctionCfg& cfg, const FunctionCounts& counts, const BlockLayout& layout,
                               const EmittedCode& copy) {
  FunctionPlacement out;
  std::vector<uint64_t> sizes = relocated_block_sizes(cfg);
  out.ext_tsp_original = ext_tsp_score(sizes, counts.edges, original_layout(cfg).order);
  out.ext_tsp_laid_out = ext_tsp_score(sizes, counts.edges, layout.order);
  out.taken_original = taken(cfg, counts, original_layout(cfg));
  out.taken_laid_out = taken(cfg, counts, layout);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> in_copy;  // original instruction → (address, length) in the copy
  for (std::size_t k = 0; k < copy.translation.size(); ++k) {
    const TranslationEntry& t = copy.translation[k];
    if (t.kind != Translation::Copied && t.kind != Translation::Inverted && t.kind != Translation::Promoted) continue;
    uint64_t end = k + 1 < copy.translation.size() ? copy.translation[k + 1].new_addr : copy.base + copy.code_size;
    in_copy.emplace(t.original_addr, std::pair{t.new_addr, end - t.new_addr});
  }
  for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
    const Block& b = cfg.blocks[k];
    const uint64_t n = counts.blocks[k];
    if (n == 0) continue;
    out.hot_bytes_original += b.end - b.start;
    for (std::size_t i = b.first; i < b.first + b.count; ++i) {
      const Instruction& in = cfg.instructions[i];
      out.original.push_back({in.addr, in.length, n});
      auto placed = layout.copied[k] ? in_copy.find(in.addr) : in_copy.end();
      if (layout.copied[k] && placed == in_copy.end()) continue;  // a dropped jmp: not run in the copy
      PlacedCount p = placed == in_copy.end() ? PlacedCount{in.addr, in.length, n}
                                              : PlacedCount{placed->second.first, placed->second.second, n};
      out.laid_out.push_back(p);
      out.hot_bytes_laid_out += p.length;
    }
  }
  return out;
}

LayoutMetrics metrics_of(const std::vector<FunctionPlacement>& functions, bool laid_out) {
  LayoutMetrics m;
  for (const FunctionPlacement& f : functions) {
    m.ext_tsp += laid_out ? f.ext_tsp_laid_out : f.ext_tsp_original;
    m.taken_jumps += laid_out ? f.taken_laid_out : f.taken_original;
    m.hot_bytes += laid_out ? f.hot_bytes_laid_out : f.hot_bytes_original;
    for (const PlacedCount& p : f.original) m.instructions += p.count;
  }
  m.lines_99 = units_for_99(functions, laid_out, 6);
  m.pages_99 = units_for_99(functions, laid_out, 12);
  return m;
}

namespace {

void add_indirect(IndirectMetrics& m, const SiteCounts& counts, const std::set<uint64_t>& copied) {
  for (const auto& [offset, v] : counts.values) {
    const uint64_t calls = v.calls();
    if (calls == 0) continue;
    ++m.sites, m.calls += calls;
    if (v.targets.empty()) continue;
    const auto [top, n] = v.targets.front();
    m.to_top += n;
    if (copied.count(top)) m.to_top_copied += n;
    if (10 * n >= 9 * calls) ++m.sites_90;
  }
}

bool touches_rsp(const Instruction& in) {
  for (std::size_t k = 0; k < in.operand_count && k < in.ops.size(); ++k)
    if (in.ops[k].reg == ZYDIS_REGISTER_RSP || in.ops[k].base == ZYDIS_REGISTER_RSP || in.ops[k].index == ZYDIS_REGISTER_RSP)
      return true;
  // push, pop, call and their kind move rsp without naming it as an operand.
  return in.mnemonic == ZYDIS_MNEMONIC_PUSH || in.mnemonic == ZYDIS_MNEMONIC_POP || in.mnemonic == ZYDIS_MNEMONIC_PUSHFQ ||
         in.mnemonic == ZYDIS_MNEMONIC_POPFQ || in.mnemonic == ZYDIS_MNEMONIC_ENTER || in.mnemonic == ZYDIS_MNEMONIC_LEAVE;
}

bool small_leaf(const FunctionCfg& cfg) {
  const auto& ins = cfg.instructions;
  if (cfg.blocks.size() != 1 || ins.empty() || ins.size() > kSmallLeaf + 1 || ins.back().flow != Flow::Return) return false;
  return std::none_of(ins.begin(), ins.end() - 1,
                      [](const Instruction& in) { return in.flow != Flow::Next || touches_rsp(in); });
}

}  // namespace

CountMetrics count_metrics(const ModulePlan& plan, const ModuleCounts& counts) {
  std::map<uint64_t, const FunctionCfg*> cfg_of;
  for (const auto& c : plan.cfgs) cfg_of[c->start] = c.get();
  std::set<uint64_t> copied;
  for (const CachedFunction& f : plan.cache.functions) copied.insert(f.original_entry);
  std::vector<FunctionPlacement> placed;
  IndirectMetrics indirect;
  LeafMetrics leaves;
  for (const CachedFunction& f : plan.cache.functions) {
    auto c = counts.functions.find(f.original_entry);
    auto cfg = cfg_of.find(f.original_entry);
    if (c == counts.functions.end() || cfg == cfg_of.end()) continue;
    const uint64_t calls = counts.entries(f.original_entry);
    leaves.calls += calls;
    if (calls && small_leaf(*cfg->second)) ++leaves.leaves, leaves.leaf_calls += calls;
    placed.push_back(place_counts(*cfg->second, counts_from(*cfg->second, c->second),
                                  layout_of_copy(*cfg->second, f.code), f.code));
    add_indirect(indirect, c->second, copied);
  }
  return {metrics_of(placed, false), metrics_of(placed, true), indirect, leaves};
}

nlohmann::json to_json(const IndirectMetrics& m) {
  return {{"sites", m.sites}, {"sites_90", m.sites_90}, {"calls", m.calls}, {"to_top", m.to_top},
          {"to_top_copied", m.to_top_copied}};
}

nlohmann::json to_json(const LayoutMetrics& m) {
  return {{"ext_tsp", m.ext_tsp},
          {"instructions", m.instructions},
          {"hot_bytes", m.hot_bytes},
          {"lines_99", m.lines_99},
          {"pages_99", m.pages_99},
          {"taken_jumps_per_1000", m.taken_per_1000()}};
}

}  // namespace dyni::jit
