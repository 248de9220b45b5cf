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

#include "common/result.h"

namespace dyni {

inline constexpr int64_t kMetricsIntervalMs = 15000;

// `status`: the data of a status response (daemon, license, targets);
// `now_unix`: for the license's days left.
std::string prometheus_metrics(const nlohmann::json& status, int64_t now_unix);

// Writes `text` as the textfile `path` (0644, without fsync: a scrape reads
// it next). Its directory belongs to node_exporter's user, who may plant
// links there: the directory is opened without following a link, the
// temporary file is created exclusively under a random name beside it, and
// renamed over `path` (a rename replaces a link, never follows it).
// "" when the directory does not exist (nothing to do), else an error.
Status write_textfile(const std::string& path, const std::string& text);
// Removes it the same way (dynid stopping: no stale dyni_daemon_up 1).
void remove_textfile(const std::string& path);

}  // namespace dyni
