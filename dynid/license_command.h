// `dynid --license=status|start|stop [--token=TOKEN]`: the license commands
// of `dyni -license=...`, run one-shot in this binary. The CLI runs them here
// so that it loads no libcrypto itself: its relocation is half of the CLI's
// start-up, which every `dyni -status` pays (on a loaded 2-CPU host about
// 6 ms of CPU and 120 page faults of 260). Works without a running daemon.
#pragma once

#include <string>

namespace dyni {

// Prints what `dyni -license=<action>` prints (errors on stderr, "dyni: "
// first) and returns its exit code: 0 done (status: active), 1 not.
int run_license_command(const std::string& action, const std::string& token, const std::string& config_path);

}  // namespace dyni
