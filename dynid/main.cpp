// dynid: the dyni daemon. Normally started by `dyni -start` (or systemd) and
// controlled through its socket; see README.md.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/config.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/instance_lock.h"
#include "dynid/daemon.h"
#include "dynid/license_command.h"

namespace {

const char* kUsage =
    "usage: dynid [--config=PATH] [--log-stderr] [--ready-fd=N] [--check-config] [--version]\n"
    "       dynid [--config=PATH] --license=start|stop|status [--token=TOKEN]\n"
    "  --config=PATH    config file (default $DYNI_CONFIG or /etc/dyni.conf)\n"
    "  --log-stderr     log to stderr instead of log_file (for systemd/journald)\n"
    "  --ready-fd=N     write 'ok' or 'error: <reason>' to fd N once serving (used by dyni -start)\n"
    "  --check-config   validate the config, print the first error, exit\n"
    "  --license=...    what dyni -license=... does (dyni runs it here), exit\n";

struct Args {
  dyni::DaemonOptions daemon;
  int ready_fd = -1;
  bool check_config = false;
  bool version = false;
  std::string license, token;  // --license=ACTION, --token=TOKEN
};

bool parse_args(int argc, char** argv, Args& args) {
  args.daemon.config_path = dyni::paths::config_file();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.starts_with("--config=")) args.daemon.config_path = a.substr(9);
    else if (a == "--log-stderr") args.daemon.log_to_stderr = true;
    else if (a.starts_with("--ready-fd=")) args.ready_fd = std::atoi(a.c_str() + 11);
    else if (a == "--check-config") args.check_config = true;
    else if (a == "--version") args.version = true;
    else if (a.starts_with("--license=")) args.license = a.substr(10);
    else if (a.starts_with("--token=")) args.token = a.substr(8);
    else return false;
  }
  return true;
}

void tell_starter(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string text = line + "\n";
  ssize_t n = ::write(fd, text.data(), text.size());
  (void)n;  // the starter may be gone; nothing to do about it
  ::close(fd);
}

}  // namespace

constexpr int kExitAlreadyRunning = 4;

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, args)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (args.version) {
    std::printf("dynid %s\n", DYNI_VERSION);
    return 0;
  }
  if (!args.license.empty())
    return dyni::run_license_command(args.license, args.token, args.daemon.config_path);
  if (args.check_config) {
    auto config = dyni::load_config(args.daemon.config_path);
    if (!config) std::fprintf(stderr, "%s\n", config.error().message().c_str());
    return config ? 0 : 1;
  }
  auto daemon = dyni::Daemon::start(args.daemon);
  if (!daemon) {
    dyni::log::error("dynid cannot start: {}", daemon.error().message());
    if (args.ready_fd >= 0) tell_starter(args.ready_fd, "error: " + daemon.error().message());
    else std::fprintf(stderr, "dynid: %s\n", daemon.error().message().c_str());
    // Its own code, so that systemd does not restart it again and again
    // while another dynid runs (RestartPreventExitStatus= in the unit).
    return daemon.error().message().starts_with(dyni::InstanceLock::kAlreadyRunning) ? kExitAlreadyRunning : 1;
  }
  tell_starter(args.ready_fd, "ok");
  return (*daemon)->run();
}
