// Where dyni's files live. Each default can be overridden by an environment
// variable so tests (and unusual hosts) never touch the host's /etc or /run.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dyni::paths {

std::string config_file();      // DYNI_CONFIG,       default /etc/dyni.conf
std::string run_dir();          // DYNI_RUN_DIR,      default /run/dyni
std::string state_dir();        // DYNI_STATE_DIR,    default /var/lib/dyni
std::string machine_id_file();  // DYNI_MACHINE_ID,   default /etc/machine-id
// Where a bare [exeList] name is looked up to follow its symlinks, in order:
// DYNI_BIN_DIRS (colon-separated), default the standard binary directories
// /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin.
std::vector<std::string> bin_dirs();

std::string socket_file();      // <run_dir>/dynid.sock
std::string lock_file();        // <run_dir>/dynid.lock (holds dynid's pid)
std::string license_file();     // <state_dir>/license.json

inline constexpr const char* kDefaultLogFile = "/var/log/dyni/dynid.log";

// The last component of `path` ("/usr/lib/libc.so.6" -> "libc.so.6").
inline std::string_view file_name(std::string_view path) { return path.substr(path.rfind('/') + 1); }

}  // namespace dyni::paths
