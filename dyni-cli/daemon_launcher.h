// Starting dynid for `dyni -start`: through systemd where systemd runs and the
// dynid unit is installed, else as a detached process of its own session.
// Either way the caller learns whether it came up, or the exact reason why not
// (e.g. "/etc/dyni.conf:7: unknown key 'foo' in [options]"). Also runs dynid
// one-shot, for the license commands.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::cli {

// Path of the dynid binary: $DYNI_DYNID, else next to this dyni, else ../sbin.
std::string dynid_path();

// Starts dynid and returns once it is serving, or with the reason it is not.
Status start_daemon(const std::string& config_path);

// Runs argv (dynid one-shot) with this process's stdin, stdout and stderr,
// to its end: its exit code, or why it could not run.
Result<int> run_to_completion(const std::vector<std::string>& argv);

}  // namespace dyni::cli
