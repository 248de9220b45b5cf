// ModuleProfile: hot set and its JSON form.
#include "jit/module_profile.h"

#include <algorithm>

namespace dyni::jit {

std::vector<uint64_t> ModuleProfile::hot_set(double fraction) const {
  std::vector<std::pair<uint64_t, uint64_t>> by_samples;  // (samples, addr)
  for (const auto& [addr, f] : functions) by_samples.push_back({f.samples, addr});
  std::sort(by_samples.begin(), by_samples.end(), [](auto a, auto b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<uint64_t> out;
  uint64_t covered = 0, want = static_cast<uint64_t>(fraction * static_cast<double>(total_samples));
  for (auto [samples, addr] : by_samples) {
    if (covered >= want && !out.empty()) break;
    if (samples == 0) break;
    out.push_back(addr);
    covered += samples;
  }
  return out;
}

nlohmann::json ModuleProfile::to_json() const {
  nlohmann::json fns = nlohmann::json::array();
  for (const auto& [addr, f] : functions) {
    nlohmann::json offsets = nlohmann::json::array();
    for (auto [off, n] : f.by_offset) offsets.push_back({off, n});
    nlohmann::json entry = {{"addr", addr}, {"samples", f.samples}, {"offsets", offsets}};
    auto pairs = [](const std::map<std::pair<uint64_t, uint64_t>, uint64_t>& m) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& [k, n] : m) a.push_back({k.first, k.second, n});
      return a;
    };
    if (!f.branches.empty()) entry["branches"] = pairs(f.branches);
    if (!f.traces.empty()) entry["traces"] = pairs(f.traces);
    fns.push_back(std::move(entry));
  }
  nlohmann::json calls_j = nlohmann::json::array();
  for (const CallEdge& e : calls) calls_j.push_back({e.caller, e.callee, e.weight});
  return {{"format", "dyni-module-profile-1"}, {"module", module}, {"samples", total_samples},
          {"functions", fns}, {"calls", calls_j}};
}

Result<ModuleProfile> ModuleProfile::from_json(const nlohmann::json& j) {
  try {
    if (j.value("format", "") != "dyni-module-profile-1") return fail("not a dyni module profile");
    ModuleProfile p;
    p.module = j.at("module").get<std::string>();
    p.total_samples = j.at("samples").get<uint64_t>();
    for (const auto& f : j.at("functions")) {
      FunctionSamples s;
      s.samples = f.at("samples").get<uint64_t>();
      for (const auto& o : f.at("offsets")) s.by_offset[o.at(0).get<uint64_t>()] = o.at(1).get<uint64_t>();
      for (const auto& b : f.value("branches", nlohmann::json::array()))
        s.branches[{b.at(0).get<uint64_t>(), b.at(1).get<uint64_t>()}] = b.at(2).get<uint64_t>();
      for (const auto& t : f.value("traces", nlohmann::json::array()))
        s.traces[{t.at(0).get<uint64_t>(), t.at(1).get<uint64_t>()}] = t.at(2).get<uint64_t>();
      p.functions[f.at("addr").get<uint64_t>()] = std::move(s);
    }
    for (const auto& c : j.at("calls"))
      p.calls.push_back({c.at(0).get<uint64_t>(), c.at(1).get<uint64_t>(), c.at(2).get<uint64_t>()});
    return p;
  } catch (const nlohmann::json::exception& e) {
    return fail(std::string("malformed module profile: ") + e.what());
  }
}

}  // namespace dyni::jit
