// Aggregating samples into per-function histograms and call weights.
#include "profiler/profile.h"

#include <algorithm>

namespace dyni::profiler {

// The profile of the function `loc` lies in (made on first use).
FunctionProfile& Profile::profile_of(const Location& loc) {
  FunctionKey key{loc.module, loc.function->addr};
  FunctionProfile& fp = functions_[key];
  fp.key = key;
  fp.function = loc.function;
  return fp;
}

void Profile::add(const Sample& sample) {
  ++total_;
  Location loc = symbolizer_->locate(sample.ip);
  if (loc.module < 0) {
    ++outside_modules_;
    return;
  }
  if (!loc.function) {
    ++outside_functions_;
    return;
  }
  FunctionProfile& fp = profile_of(loc);
  FunctionKey key = fp.key;
  ++fp.samples;
  ++fp.by_offset[loc.link_addr - loc.function->addr];
  add_branches(sample);
  if (sample.callchain.empty()) return;
  // The return address points just after the call; step back one byte to land in it.
  Location caller = symbolizer_->locate(sample.callchain.front() - 1);
  if (caller.function) ++calls_[{{caller.module, caller.function->addr}, key}];
}

// LBR entries, most recent first: each is a taken branch; between the target
// of one and the source of the next more recent one, code ran straight.
// Only what stays inside one function is kept (the jit's edges are per function).
void Profile::add_branches(const Sample& sample) {
  auto same_function = [&](uint64_t a, uint64_t b, FunctionProfile*& fp, uint64_t& ao, uint64_t& bo) {
    Location la = symbolizer_->locate(a), lb = symbolizer_->locate(b);
    if (!la.function || la.function != lb.function || la.module != lb.module) return false;
    fp = &profile_of(la);
    ao = la.link_addr - la.function->addr;
    bo = lb.link_addr - lb.function->addr;
    return true;
  };
  const auto& br = sample.branches;
  for (std::size_t i = 0; i < br.size(); ++i) {
    FunctionProfile* fp = nullptr;
    uint64_t from = 0, to = 0;
    if (same_function(br[i].from, br[i].to, fp, from, to)) ++fp->branches[{from, to}];
    if (i == 0) continue;
    uint64_t start = 0, end = 0;
    if (br[i].to <= br[i - 1].from && same_function(br[i].to, br[i - 1].from, fp, start, end))
      ++fp->traces[{start, end}];
  }
}

std::vector<FunctionKey> Profile::hot_set(double fraction) const {
  std::vector<const FunctionProfile*> order;
  for (const auto& [key, fp] : functions_) order.push_back(&fp);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->samples != b->samples ? a->samples > b->samples : a->key < b->key;
  });
  std::vector<FunctionKey> out;
  uint64_t covered = 0;
  for (const auto* fp : order) {
    if (total_ == 0 || static_cast<double>(covered) >= fraction * static_cast<double>(total_)) break;
    out.push_back(fp->key);
    covered += fp->samples;
  }
  return out;
}

std::vector<HotFunction> Profile::top(std::size_t n) const {
  std::vector<HotFunction> out;
  for (const FunctionKey& key : hot_set(1.0)) {
    if (out.size() >= n) break;
    const FunctionProfile& fp = functions_.at(key);
    const Module& mod = symbolizer_->modules()[static_cast<std::size_t>(key.first)];
    out.push_back({mod.path, elf::display_name(*fp.function), fp.function->addr, fp.samples,
                   100.0 * static_cast<double>(fp.samples) / static_cast<double>(total_)});
  }
  return out;
}

nlohmann::json Profile::to_json(std::size_t top_n) const {
  nlohmann::json top_list = nlohmann::json::array();
  for (const HotFunction& h : top(top_n))
    top_list.push_back({{"module", h.module}, {"function", h.name}, {"addr", h.addr},
                        {"samples", h.samples}, {"percent", h.percent}});
  return {{"samples", total_},
          {"outside_modules", outside_modules_},
          {"outside_functions", outside_functions_},
          {"functions_sampled", functions_.size()},
          {"hot_set_90", hot_set(0.90).size()},
          {"hot_set_99", hot_set(0.99).size()},
          {"top", top_list}};
}

jit::ModuleProfile Profile::module_profile(int module) const {
  jit::ModuleProfile out;
  if (module >= 0 && static_cast<std::size_t>(module) < symbolizer_->modules().size())
    out.module = symbolizer_->modules()[module].path;
  for (const auto& [key, f] : functions_) {
    if (key.first != module) continue;
    out.functions[key.second] = {f.samples, f.by_offset, f.branches, f.traces};
    out.total_samples += f.samples;
  }
  for (const auto& [edge, weight] : calls_)
    if (edge.first.first == module && edge.second.first == module)
      out.calls.push_back({edge.first.second, edge.second.second, weight});
  return out;
}

int Profile::hottest_module() const {
  std::map<int, uint64_t> per_module;
  for (const auto& [key, f] : functions_) per_module[key.first] += f.samples;
  int best = -1;
  uint64_t most = 0;
  for (auto [m, n] : per_module)
    if (n > most) best = m, most = n;
  return best;
}

}  // namespace dyni::profiler
