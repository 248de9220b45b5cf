// ModuleCounts: read from a counting cache's counters, and its JSON form.
#include "jit/module_counts.h"

namespace dyni::jit {
namespace {

nlohmann::json pairs(const std::map<uint64_t, uint64_t>& m) {
  nlohmann::json a = nlohmann::json::array();
  for (auto [offset, n] : m) a.push_back({offset, n});
  return a;
}

std::map<uint64_t, uint64_t> pairs_from(const nlohmann::json& a) {
  std::map<uint64_t, uint64_t> m;
  for (const auto& p : a) m[p.at(0).get<uint64_t>()] = p.at(1).get<uint64_t>();
  return m;
}

// A value site: [offset, [[target, calls], ...], other].
nlohmann::json values_json(const std::map<uint64_t, ValueCounts>& m) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [offset, v] : m) {
    nlohmann::json targets = nlohmann::json::array();
    for (auto [target, n] : v.targets) targets.push_back({target, n});
    a.push_back({offset, targets, v.other});
  }
  return a;
}

std::map<uint64_t, ValueCounts> values_from(const nlohmann::json& a) {
  std::map<uint64_t, ValueCounts> m;
  for (const auto& site : a) {
    ValueCounts v;
    const auto& targets = site.at(1);
    if (targets.size() > kValueTargets) throw nlohmann::json::other_error::create(501, "too many targets at a site", &site);
    for (const auto& t : targets) v.targets.emplace_back(t.at(0).get<uint64_t>(), t.at(1).get<uint64_t>());
    v.other = site.at(2).get<uint64_t>();
    m[site.at(0).get<uint64_t>()] = std::move(v);
  }
  return m;
}

}  // namespace

uint64_t ModuleCounts::entries(uint64_t function) const {
  auto f = functions.find(function);
  if (f == functions.end()) return 0;
  auto entry = f->second.blocks.find(0);
  return entry == f->second.blocks.end() ? 0 : entry->second;
}

nlohmann::json ModuleCounts::to_json() const {
  nlohmann::json fns = nlohmann::json::array();
  for (const auto& [addr, c] : functions)
    fns.push_back({{"addr", addr}, {"blocks", pairs(c.blocks)}, {"falls", pairs(c.falls)}, {"values", values_json(c.values)}});
  return {{"format", "dyni-module-counts-1"}, {"module", module}, {"build_id", build_id},
          {"seconds", seconds}, {"functions", fns}};
}

Result<ModuleCounts> ModuleCounts::from_json(const nlohmann::json& j) {
  try {
    if (j.value("format", "") != "dyni-module-counts-1") return fail("not a dyni counts file");
    ModuleCounts c;
    c.module = j.at("module").get<std::string>();
    c.build_id = j.at("build_id").get<std::string>();
    c.seconds = j.at("seconds").get<double>();
    for (const auto& f : j.at("functions"))
      c.functions[f.at("addr").get<uint64_t>()] = {pairs_from(f.at("blocks")), pairs_from(f.at("falls")),
                                                    f.contains("values") ? values_from(f.at("values"))  // since value sites
                                                                         : std::map<uint64_t, ValueCounts>{}};
    return c;
  } catch (const nlohmann::json::exception& e) {
    return fail(std::string("malformed counts file: ") + e.what());
  }
}

ModuleCounts read_counts(const CodeCache& cache, std::span<const uint64_t> words, uint64_t bias) {
  const std::vector<uint64_t> values = cache.counter_layout().sums(words);
  ModuleCounts out;
  for (const CachedFunction& f : cache.functions)
    if (!f.counters.empty()) out.functions[f.original_entry] = site_counts(f.original_entry, f.counters, values, bias);
  return out;
}

}  // namespace dyni::jit
