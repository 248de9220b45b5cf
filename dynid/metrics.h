// dyni's facts in Prometheus's text exposition format (issue 23 item 5),
// from what -status -json says: per target its state, functions optimized,
// cache and huge-page bytes, longest stop window and seconds to
// `dynimized`; dynid's own CPU seconds and RSS; the license's days left.
// `dyni -metrics` prints it; dynid writes it as a node_exporter textfile
// ([options] metrics_textfile) every kMetricsIntervalMs.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dyni {

inline constexpr int64_t kMetricsIntervalMs = 15000;

// `status`: the data of a status response (daemon, license, targets);
// `now_unix`: for the license's days left.
std::string prometheus_metrics(const nlohmann::json& status, int64_t now_unix);

}  // namespace dyni
