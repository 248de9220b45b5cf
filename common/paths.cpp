// Default file locations and their environment overrides.
#include "common/paths.h"

#include <algorithm>
#include <cstdlib>

namespace dyni::paths {
namespace {

std::string from_env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return (value && *value) ? value : fallback;
}

}  // namespace

std::string config_file() { return from_env("DYNI_CONFIG", "/etc/dyni.conf"); }
std::string run_dir() { return from_env("DYNI_RUN_DIR", "/run/dyni"); }
std::string state_dir() { return from_env("DYNI_STATE_DIR", "/var/lib/dyni"); }
std::string machine_id_file() { return from_env("DYNI_MACHINE_ID", "/etc/machine-id"); }

std::vector<std::string> bin_dirs() {
  std::string list = from_env("DYNI_BIN_DIRS", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  std::vector<std::string> dirs;
  for (std::size_t start = 0, end; start <= list.size(); start = end + 1) {
    end = std::min(list.find(':', start), list.size());
    if (end > start) dirs.push_back(list.substr(start, end - start));
  }
  return dirs;
}

std::string socket_file() { return run_dir() + "/dynid.sock"; }
std::string lock_file() { return run_dir() + "/dynid.lock"; }
std::string license_file() { return state_dir() + "/license.json"; }

}  // namespace dyni::paths
