// DyniHost: a private dyni installation for one integration test — its own
// config, run, state and machine-id paths under a temporary directory — plus
// helpers to run the real `dyni` CLI, start real target processes and wait
// for what `dyni -status` reports.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dynid/cache_record.h"

namespace dyni::test {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Options used by tests: fast scans and a short busy window.
inline constexpr const char* kFastOptions =
    "[options]\nbusy_threshold_percent = 40\nbusy_window_ms = 600\nscan_interval_ms = 100\n";

class DyniHost {
 public:
  DyniHost();
  ~DyniHost();
  DyniHost(const DyniHost&) = delete;
  DyniHost& operator=(const DyniHost&) = delete;

  const std::string& dir() const { return dir_; }
  std::string run_dir() const { return dir_ + "/run"; }
  std::string socket_path() const { return run_dir() + "/dynid.sock"; }
  std::string log_path() const { return dir_ + "/dynid.log"; }
  std::string config_path() const { return dir_ + "/dyni.conf"; }
  // The only binary directory dynid follows [exeList] names' symlinks in
  // (DYNI_BIN_DIRS), so tests never depend on the host's /usr/bin.
  std::string bin_dir() const { return dir_ + "/bin"; }

  // Writes dyni.conf: [exeList] entries, then `rest` (options, license).
  void write_config(const std::vector<std::string>& exe_list, const std::string& rest = kFastOptions);
  void write_raw_config(const std::string& text);
  // Installs a site license key ([license] public_key) and binds a valid token.
  void license_this_host();

  // Runs the real dyni CLI with this host's environment (optionally as `uid`).
  RunResult dyni(const std::vector<std::string>& args, std::optional<uid_t> uid = {}) const;
  RunResult run(const std::vector<std::string>& argv, std::optional<uid_t> uid = {}) const;

  // Copies a test program into the host directory under `name` (mode 0755).
  std::string install_program(const std::string& source, const std::string& name) const;
  // Starts a target process; it is killed when the host is destroyed.
  pid_t spawn(const std::vector<std::string>& argv);
  void kill_target(pid_t pid);

  // Polls `dyni -status -json` until `ready` holds or `timeout` passes.
  bool wait_for(const std::function<bool(const nlohmann::json&)>& ready,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // The state of target `pid` in -status -json ("" when not listed).
  std::string state_of(pid_t pid) const;
  bool wait_for_state(pid_t pid, const std::string& state,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  nlohmann::json status_json() const;
  // Target `pid`'s -status -json "dynimized" facts once its perf map and gdb
  // file are named, or said missing (an adopted target's files come just
  // after its state); {} when that does not happen within `timeout`.
  nlohmann::json dynimized_with_files(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  pid_t daemon_pid() const;
  // True while `pid` runs (a zombie awaiting its reaper does not count).
  static bool alive(pid_t pid);  // from the lock file; 0 when none
  std::string log() const;

 private:
  std::vector<std::string> environment() const;

  std::string dir_;
  std::vector<pid_t> targets_;
};

// Whether every r-x mapping of file `path` (as the maps name it) in `pid`
// holds the file's bytes: no dyni patch left, or none yet.
bool text_equals_file(pid_t pid, const std::string& path);
// dyni's caches in `pid` of one tier (optimized code, or counting copies):
// mappings that start with a valid record.
std::size_t caches_in(pid_t pid, CacheTier tier = CacheTier::Optimized);

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick),
// for a test's own server: a server another test left behind on a fixed
// port then never fails this one.
int free_tcp_port();

// The command prefix that runs a program under the seccomp filters of
// Debian's redis-server.service (SystemCallFilter=@system-service,
// SystemCallFilter=~@privileged @resources, MemoryDenyWriteExecute=true in
// systemd 252's seccomp form, and the kernel's PR_SET_MDWE where it has it),
// rebuilt by dyni-test-seccomp-exec from this host's systemd-analyze lists,
// which it writes under `dir`. Empty when systemd-analyze is missing.
std::vector<std::string> under_redis_unit_filters(const std::string& dir);

// A demangled name as `perf report` prints it: no return type, no
// parameter list ("unsigned long hot_work<3>(unsigned long)" → "hot_work<3>").
std::string perf_style_name(const std::string& name);

}  // namespace dyni::test
