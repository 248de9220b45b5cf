// Summing instruction samples into blocks, with Poisson confidence intervals.
#include "jit/block_profile.h"

#include <cmath>

namespace dyni::jit {

// Wilson–Hilferty approximation of the chi-square quantiles behind the exact
// (Garwood) interval: within 1 % for n >= 10, on the low (conservative) side
// for smaller n; exact at n = 0 and n = 1.
std::pair<double, double> poisson_interval_95(uint64_t n) {
  constexpr double z = 1.959963984540054;
  double k = static_cast<double>(n);
  double low = 0;
  if (n > 0) {
    double a = 1.0 - 1.0 / (9.0 * k) - z / (3.0 * std::sqrt(k));
    low = k * a * a * a;
  }
  double k1 = k + 1;
  double b = 1.0 - 1.0 / (9.0 * k1) + z / (3.0 * std::sqrt(k1));
  double high = k1 * b * b * b;
  if (n == 0) high = 3.689;  // -ln(0.025): exact for zero observed
  if (n == 1) low = 0.02532;  // -ln(0.975): exact for one observed
  return {std::max(0.0, low), high};
}

std::vector<BlockCount> block_counts(const FunctionCfg& cfg, const std::map<uint64_t, uint64_t>& by_offset) {
  std::vector<BlockCount> out(cfg.blocks.size());
  for (std::size_t i = 0; i < cfg.blocks.size(); ++i) {
    const Block& b = cfg.blocks[i];
    auto from = by_offset.lower_bound(b.start - cfg.start);
    auto to = by_offset.lower_bound(b.end - cfg.start);
    for (auto it = from; it != to; ++it) out[i].samples += it->second;
    auto [low, high] = poisson_interval_95(out[i].samples);
    out[i].low = low;
    out[i].high = high;
  }
  return out;
}

}  // namespace dyni::jit
