// dynid's top level: owns the config, the instance lock, the control socket
// and the target table, and runs the main loop:
//
//   every scan_interval_ms:  discover targets in /proc → reconcile → advance states
//                            → start a lifecycle thread for each target turned busy
//   on a control request:    answer it (status, stop, reload, undo, redo, ...)
//   on SIGHUP:               reload the config;  on SIGTERM/SIGINT: stop
//
// Stopping never touches targets: optimized targets stay optimized (I2).
#pragma once

#include <map>
#include <set>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/instance_lock.h"
#include "common/license_store.h"
#include "common/protocol.h"
#include "dynid/control_server.h"
#include "dynid/discovery.h"
#include "dynid/lifecycle.h"
#include "dynid/perf_map.h"
#include "dynid/target_table.h"

namespace dyni {

struct DaemonOptions {
  std::string config_path;
  bool log_to_stderr = false;     // under systemd: journald takes stderr
  std::string proc_root = "/proc";
};

class Daemon {
 public:
  // Reads the config, opens the log, takes the lock, opens the socket.
  // Any failure is returned with the message the operator should see.
  static Result<std::unique_ptr<Daemon>> start(const DaemonOptions& options);
  ~Daemon();

  // Serves until stopped; returns the process exit code.
  int run();

 private:
  Daemon(DaemonOptions options, Config config, InstanceLock lock, ControlServer server,
         int signal_fd);

  void scan();
  void watch_processes();
  void write_metrics_textfile();
  void sync_lifecycles();
  profiler::RecorderOptions recorder_options() const;
  DynimizeOptions dynimize_options() const;
  protocol::Response profile(const protocol::Request& request) const;
  void check_license();
  void use_exe_list();
  void on_signal();
  Status reload(const std::string& why);
  protocol::Response handle(const protocol::Request& request);
  protocol::Response answer(const protocol::Request& request);
  // Everything -status -json shows; `brief`: what plain -status prints (one
  // line a target), without each target's injection and counting details,
  // which with hundreds of targets (a server's workers) took most of the time.
  protocol::Response status(bool brief = false) const;
  protocol::Response undo_or_redo(bool undo);
  void keep_groups_undone();
  int poll_timeout_ms(int64_t now);
  void warn_if_slow(const char* what, int64_t since_ms);
  static constexpr int64_t kSlowLoopMs = 1000;
  // Adoption checks (a thread each) under way at once: 200 connections
  // opened together must not starve the main loop of the CPU (-status
  // answers meanwhile); the rest wait for the next scans.
  static constexpr std::size_t kMaxAdoptionChecks = 4;
  // The main loop's nice value: it answers the control socket and does
  // little work, so that -status, -undo and -stop answer while the target
  // keeps every CPU busy. Lifecycle threads (profiling, the jit) go back to
  // nice 0 as they start (lifecycle.cpp).
  static constexpr int kMainLoopNice = -5;

  DaemonOptions options_;
  Config config_;
  ExeMatcher exe_matcher_;  // config_.exe_list with its symlinks resolved (use_exe_list)
  ProcessIdentities identities_{nullptr};  // kept across scans where the kernel reports process events
  InstanceLock lock_;
  ControlServer server_;
  int signal_fd_;
  TargetTable targets_;
  // One per target past `waiting`; declared after targets_ so it is destroyed
  // (threads joined) before the table they update.
  std::map<pid_t, std::unique_ptr<TargetLifecycle>> lifecycles_;
  // Lifecycles whose target left the pipeline, until their threads finish:
  // the main loop never waits for a jit or a stop window (requests and scans
  // go on meanwhile), and their pid gets no new lifecycle before that.
  std::map<pid_t, std::unique_ptr<TargetLifecycle>> retiring_;
  // Waiting targets already checked for a cache of dyni's (pid, start time).
  std::set<std::pair<pid_t, uint64_t>> adoption_checked_;
  StalePerfMaps stale_perf_maps_;  // maps of exited targets, removed once their pid is another's, or past the last kKeptHere
  // Members of groups dyni -undo undid (TargetTable::group_undone) that
  // keep_groups_undone tried to undo since the last -undo or -redo: once each.
  std::set<std::pair<pid_t, uint64_t>> group_undo_tried_;
  license::LicenseState license_;
  bool stopping_ = false;
  int64_t started_unix_ms_;
  int64_t next_scan_ms_ = 0;
  int64_t next_license_check_ms_ = 0;
  int64_t next_metrics_ms_ = 0;
  bool metrics_warned_ = false;  // once per run of failures
};

}  // namespace dyni
