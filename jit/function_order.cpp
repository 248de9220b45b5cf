// C3 clustering of functions by their hottest caller, then density order.
#include "jit/function_order.h"

#include <algorithm>
#include <map>

namespace dyni::jit {
namespace {

struct Cluster {
  std::vector<uint64_t> ids;
  uint64_t size = 0, samples = 0;
  double density() const { return size ? static_cast<double>(samples) / static_cast<double>(size) : 0; }
};

}  // namespace

std::vector<uint64_t> order_functions(const std::vector<FunctionNode>& nodes,
                                      const std::vector<CallEdge>& edges, const OrderOptions& options) {
  std::map<uint64_t, std::size_t> cluster_of;  // function id → cluster index
  std::vector<Cluster> clusters;
  for (const FunctionNode& n : nodes) {
    cluster_of[n.id] = clusters.size();
    clusters.push_back({{n.id}, n.size, n.samples});
  }
  // The hottest caller of each callee (ties: the lower caller id, for determinism).
  std::map<uint64_t, CallEdge> hottest_caller;
  for (const CallEdge& e : edges) {
    if (e.caller == e.callee || !cluster_of.count(e.caller) || !cluster_of.count(e.callee)) continue;
    auto [it, fresh] = hottest_caller.emplace(e.callee, e);
    if (!fresh && (e.weight > it->second.weight || (e.weight == it->second.weight && e.caller < it->second.caller)))
      it->second = e;
  }
  std::vector<FunctionNode> by_heat = nodes;
  std::sort(by_heat.begin(), by_heat.end(), [](const auto& a, const auto& b) {
    return a.samples != b.samples ? a.samples > b.samples : a.id < b.id;
  });
  for (const FunctionNode& f : by_heat) {
    auto caller = hottest_caller.find(f.id);
    if (caller == hottest_caller.end()) continue;
    std::size_t into = cluster_of[caller->second.caller], from = cluster_of[f.id];
    Cluster& a = clusters[into];
    Cluster& b = clusters[from];
    if (into == from || b.ids.front() != f.id) continue;  // f must head its cluster
    if (a.size + b.size > options.max_cluster_bytes) continue;
    if (a.density() < options.min_density_ratio * b.density()) continue;
    for (uint64_t id : b.ids) cluster_of[id] = into;
    a.ids.insert(a.ids.end(), b.ids.begin(), b.ids.end());
    a.size += b.size;
    a.samples += b.samples;
    b = Cluster{};
  }
  std::vector<const Cluster*> live;
  for (const Cluster& c : clusters)
    if (!c.ids.empty()) live.push_back(&c);
  std::stable_sort(live.begin(), live.end(), [](const Cluster* a, const Cluster* b) {
    return a->density() > b->density();
  });
  std::vector<uint64_t> order;
  for (const Cluster* c : live) order.insert(order.end(), c->ids.begin(), c->ids.end());
  return order;
}

}  // namespace dyni::jit
