// optimize_module: the phases of pipeline.h in order, each one call deep.
#include "jit/pipeline.h"

#include <fmt/format.h>

#include <set>

#include "jit/block_profile.h"
#include "jit/function_order.h"

namespace dyni::jit {
namespace {

const FunctionSamples* samples_of(const ModuleInput& in, uint64_t addr) {
  if (!in.profile) return nullptr;
  auto it = in.profile->functions.find(addr);
  return it == in.profile->functions.end() ? nullptr : &it->second;
}

// Step 1: analyse, keeping the functions that are fully understood.
void analyse(const ModuleInput& in, ModulePlan& plan) {
  std::set<uint64_t> seen;
  for (uint64_t addr : in.hot) {
    if (!seen.insert(addr).second) continue;
    const FunctionSamples* s = samples_of(in, addr);
    uint64_t samples = s ? s->samples : 0;
    plan.hot_samples += samples;
    const elf::Function* f = in.functions->find(addr);
    Result<FunctionCfg> cfg = f && f->addr == addr ? build_cfg(*f, *in.image)
                                                   : fail(fmt::format("no function starts at {:#x}", addr));
    if (!cfg) {
      plan.rejected.push_back({addr, f ? elf::display_name(*f) : "", cfg.error().message(), samples});
      continue;
    }
    plan.accepted_samples += samples;
    plan.cfgs.push_back(std::make_unique<FunctionCfg>(std::move(*cfg)));
  }
}

// Step 2: block layout from the function's samples.
BlockLayout lay_out(const ModuleInput& in, const FunctionCfg& cfg, const LayoutOptions& options) {
  const FunctionSamples* s = samples_of(in, cfg.start);
  if (!s && !options.shuffle_seed) return original_layout(cfg);
  return layout_blocks(cfg, block_counts(cfg, s ? s->by_offset : std::map<uint64_t, uint64_t>{}), options);
}

// Step 3: function order by call-graph affinity.
std::vector<const FunctionCfg*> order(const ModuleInput& in, const ModulePlan& plan) {
  std::vector<FunctionNode> nodes;
  std::map<uint64_t, const FunctionCfg*> by_addr;
  for (const auto& cfg : plan.cfgs) {
    const FunctionSamples* s = samples_of(in, cfg->start);
    nodes.push_back({cfg->start, cfg->end - cfg->start, s ? s->samples : 0});
    by_addr[cfg->start] = cfg.get();
  }
  std::vector<CallEdge> edges;
  if (in.profile)
    for (const CallEdge& e : in.profile->calls)
      if (by_addr.count(e.caller) && by_addr.count(e.callee)) edges.push_back(e);
  std::vector<const FunctionCfg*> out;
  for (uint64_t id : order_functions(nodes, edges)) out.push_back(by_addr.at(id));
  return out;
}

}  // namespace

Result<ModulePlan> optimize_module(const ModuleInput& in, const JitOptions& options) {
  if (!in.functions || !in.image) return fail("optimize_module: no module given");
  ModulePlan plan;
  analyse(in, plan);
  std::vector<HotCode> hot;
  for (const FunctionCfg* cfg : order(in, plan)) hot.push_back({cfg, lay_out(in, *cfg, options.layout)});
  auto cache = build_code_cache(hot, in.cache_base, in.plt, options.verify);
  if (!cache) return std::unexpected(cache.error());
  plan.cache = std::move(*cache);
  return plan;
}

}  // namespace dyni::jit
