// dyni: the command-line interface. Talks to dynid over its control socket;
// starts dynid for -start; runs dynid one-shot for the license commands
// (they work without the daemon).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "common/config.h"
#include "common/file_io.h"
#include "common/instance_lock.h"
#include "common/paths.h"
#include "dyni-cli/cli_args.h"
#include "dyni-cli/control_client.h"
#include "dyni-cli/daemon_launcher.h"
#include "common/printable.h"
#include "dynid/cache_scan.h"
#include "dynid/copy_origins.h"
#include "profiler/process_maps.h"
#include "dynid/metrics.h"

namespace dyni::cli {
namespace {

constexpr const char* kNotRunning = "dyni is not running";

int report_error(const std::string& message) {
  std::cerr << "dyni: " << message << "\n";
  return kExitError;
}

// Sends one request; prints "dyni is not running" (exit 3) when there is no daemon.
int request(const std::string& command, auto&& on_response) {
  auto r = call(paths::socket_file(), {command, nlohmann::json::object()});
  if (!r) return report_error(r.error().message());
  if (!r->daemon_running) {
    std::cout << kNotRunning << "\n";
    return kExitNotRunning;
  }
  if (!r->response.ok) return report_error(r->response.message);
  return on_response(r->response);
}

int print_message(const protocol::Response& response) {
  std::cout << response.message << "\n";
  return kExitOk;
}

int do_start() {
  auto ping = call(paths::socket_file(), {protocol::cmd::kPing, {}}, 3000);
  if (ping && ping->daemon_running && ping->response.ok) {
    std::cout << "dyni is already running\n";
    return kExitOk;
  }
  if (auto started = start_daemon(paths::config_file()); !started)
    return report_error(started.error().message());
  std::cout << "dyni started\n";
  return kExitOk;
}

int do_stop() {
  return request(protocol::cmd::kStop, [](const protocol::Response&) {
    // The daemon answered; it is gone once its instance lock is free.
    for (int waited = 0; InstanceLock::is_held(paths::lock_file()); waited += 50) {
      if (waited >= 10000) return report_error("dynid did not exit within 10 s");
      ::usleep(50 * 1000);
    }
    std::cout << "dyni stopped\n";
    return kExitOk;
  });
}

// States in colour only for a person at a terminal: never into a pipe or a
// file, nor with NO_COLOR set (no-color.org) or TERM=dumb.
bool colours_wanted() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR") && term && std::string(term) != "dumb";
}

// `text` (a target's status line) in its state's colour: green dynimized,
// red failed or unsupported, yellow on the way; others plain.
std::string coloured(const std::string& text, const std::string& state, bool colour) {
  const char* code = state == "dynimized"                         ? "32"
                     : state == "failed" || state == "unsupported" ? "31"
                     : state == "profiling" || state == "dynimizing" ? "33"
                                                                   : nullptr;
  if (!colour || !code) return text;
  return fmt::format("\033[{}m{}\033[0m", code, text);
}

int print_status(const protocol::Response& response, bool json) {
  const auto& data = response.data;
  if (json) {
    nlohmann::json out = {{"running", true}};
    out.update(data);
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "dyni is running\n";
  const bool colour = colours_wanted();
  for (const auto& t : data.value("targets", nlohmann::json::array()))
    std::cout << t.value("name", "?") << ", pid: " << t.value("pid", 0) << ", "
              << coloured(t.value("status", "?"), t.value("state", ""), colour) << "\n";
  std::cout << "license: " << data["license"].value("summary", "unknown") << "\n";
  return kExitOk;
}

int do_status(bool json) {
  // Plain -status prints a line a target: the daemon leaves out the details
  // only -json shows (a daemon that does not know "brief" sends them anyway).
  const nlohmann::json args = json ? nlohmann::json::object() : nlohmann::json{{"brief", true}};
  auto r = call(paths::socket_file(), {protocol::cmd::kStatus, args});
  if (!r) return report_error(r.error().message());
  if (!r->daemon_running) {
    std::cout << (json ? "{\n  \"running\": false\n}" : kNotRunning) << "\n";
    return kExitNotRunning;
  }
  if (!r->response.ok) return report_error(r->response.message);
  return print_status(r->response, json);
}

// The status as Prometheus metrics (dynid/metrics.h); with no daemon only
// dyni_daemon_up 0, so that a scrape still says so (exit 3).
int do_metrics() {
  auto r = call(paths::socket_file(), {protocol::cmd::kStatus, {}});
  if (!r) return report_error(r.error().message());
  if (!r->daemon_running) {
    std::cout << prometheus_metrics(nlohmann::json::object(), ::time(nullptr));
    return kExitNotRunning;
  }
  if (!r->response.ok) return report_error(r->response.message);
  std::cout << prometheus_metrics(r->response.data, ::time(nullptr));
  return kExitOk;
}

// Prints a target's profile like `perf report`: hottest functions first.
int print_profile(const protocol::Response& response, bool json) {
  const auto& d = response.data;
  if (json) {
    std::cout << d.dump(2) << "\n";
    return kExitOk;
  }
  const auto& p = d["profile"];
  std::cout << d.value("name", "?") << ", pid: " << d.value("pid", 0) << ", " << d.value("state", "?")
            << "\n"
            << p.value("samples", 0) << " samples (" << p.value("event", "?") << " at "
            << p.value("frequency_hz", 0) << " Hz, " << p.value("lost", 0) << " lost) over "
            << fmt::format("{:.1f}", p.value("seconds", 0.0)) << " s from " << p.value("threads_seen", 0)
            << " threads; " << p.value("hot_set_90", 0) << " functions cover 90%, "
            << p.value("hot_set_99", 0) << " cover 99%"
            << (p.value("stable", false) ? " (stable)" : "") << "\n";
  if (p.contains("jit")) {
    const auto& jit = p["jit"];
    if (jit.contains("error"))
      std::cout << "jit plan failed: " << jit.value("error", "?") << "\n";
    else
      std::cout << fmt::format("jit plan: {} functions ({:.1f}% of sampled CPU), {} KiB of cache, {} entries to patch"
                               " ({})\n",
                               jit.value("functions", 0), jit.value("sampled_cpu_accepted_percent", 0.0),
                               jit.value("cache_bytes", 0) / 1024, jit.value("entries_patched", 0),
                               jit.value("tier", "") == "counting" ? "counting copies, injected"
                               : jit.value("injected", false)      ? "injected"
                                                                   : "not injected yet");
  }
  if (!p.value("modules", nlohmann::json::array()).empty()) {
    std::string line = "modules:";
    for (const auto& m : p["modules"]) {
      std::string module = m.value("module", "?");
      const nlohmann::json copied = m.value("optimized_percent", nlohmann::json());
      line += fmt::format(" {} {:.1f} %{},", module.substr(module.rfind('/') + 1), m.value("percent", 0.0),
                          copied.is_number()                 ? fmt::format(" ({:.1f} in copies)", copied.get<double>())
                          : m.value("optimized", false) ? " (optimized)"
                                                        : "");
    }
    line.pop_back();
    if (p.value("sampled_cpu_optimized_percent", nlohmann::json()).is_number())
      line += fmt::format("; {:.1f} % of all sampled CPU in copied functions", p["sampled_cpu_optimized_percent"].get<double>());
    std::cout << line << "\n";
  }
  if (p.contains("layout_by_counts")) {
    std::cout << "what the counts say (99 % of the executed instructions):\n";
    for (const char* which : {"original", "laid_out"}) {
      const auto& m = p["layout_by_counts"][which];
      std::cout << fmt::format("  {:<9} ext-TSP {:.4g}, {} bytes ran, in {} lines and {} pages, {:.1f} taken jumps "
                               "per 1,000 instructions\n",
                               std::string(which) == "original" ? "original:" : "laid out:", m.value("ext_tsp", 0.0),
                               m.value("hot_bytes", 0), m.value("lines_99", 0), m.value("pages_99", 0),
                               m.value("taken_jumps_per_1000", 0.0));
    }
  }
  std::cout << fmt::format("{:>8}  {:>8}  {:<20}  {}\n", "percent", "samples", "module", "function");
  for (const auto& f : p.value("top", nlohmann::json::array())) {
    std::string module = f.value("module", "?");
    module = module.substr(module.rfind('/') + 1);
    std::cout << fmt::format("{:>7.2f}%  {:>8}  {:<20}  {}\n", f.value("percent", 0.0),
                             f.value("samples", 0), module, f.value("function", "?"));
  }
  return kExitOk;
}

int do_profile(const Command& command) {
  auto r = call(paths::socket_file(), {protocol::cmd::kProfile, {{"pid", command.pid}}});
  if (!r) return report_error(r.error().message());
  if (!r->daemon_running) {
    std::cout << kNotRunning << "\n";
    return kExitNotRunning;
  }
  if (!r->response.ok) return report_error(r->response.message);
  return print_profile(r->response, command.json);
}

// Each address as the copy that held it and the original it stands for,
// from the origins dynid recorded (dynid/copy_origins.h): no daemon needed,
// and the process may be gone.
int do_addr2orig(const Command& command) {
  auto file = origins_file_for(static_cast<pid_t>(command.pid));
  if (!file) return report_error(file.error().message());
  auto text = read_file(file->path, 256 << 20);
  if (!text) return report_error(text.error().message());
  std::size_t skipped = 0;
  auto copies = parse_origins(*text, &skipped);
  if (!copies) return report_error(file->path + ": " + copies.error().message());
  if (file->gone) std::cout << "process " << command.pid << " has exited; its copies as recorded in " << file->path << "\n";
  if (skipped) std::cout << skipped << " line(s) of " << file->path << " cut short, left out\n";
  for (uint64_t addr : command.addresses) std::cout << describe_origin(addr, origin_of(*copies, addr)) << "\n";
  return kExitOk;
}

// Every process whose memory holds a cache of dyni's with live patches (an
// entry or a call site that jumps into it), found without the daemon: what
// the package's removal checks before it lets dyni go. Exit 1 if any.
int do_caches() {
  std::size_t running = 0;
  for (pid_t pid : list_numeric_entries("/proc")) {
    auto maps = profiler::read_maps(pid);
    if (!maps) continue;  // gone, or a kernel thread
    for (const CacheRecord& r : find_cache_records(pid, *maps)) {
      const std::size_t live = live_patches(pid, r.patches);
      if (live == 0) continue;
      ++running;
      auto comm = read_file(fmt::format("/proc/{}/comm", pid), 64);
      std::cout << fmt::format("{} (pid {}): {} cache at {:#x}, {} of its {} patches live\n",
                               comm ? one_line(*comm) : "?", pid,
                               r.tier == CacheTier::Counting ? "counting" : "optimized", r.cache_addr, live,
                               r.patches.size());
    }
    for (const std::string& why : unreadable_cache_records(pid, *maps))
      ++running, std::cout << fmt::format("pid {}: {} (its patches may be live)\n", pid, why);
  }
  if (running == 0) std::cout << "no process runs code of dyni's\n";
  return running ? kExitError : kExitOk;
}

// Tells a running daemon to re-read the license; silent when none runs.
void notify_daemon_of_license() {
  auto r = call(paths::socket_file(), {protocol::cmd::kLicenseChanged, {}}, 3000);
  (void)r;
}

// dynid runs the license commands (dynid/license_command.h: this binary
// loads no libcrypto) and prints their answer; the daemon, if one runs, is
// told of a change.
int do_license(const Command& command) {
  const char* action = command.action == Action::LicenseStatus ? "status"
                       : command.action == Action::LicenseStop ? "stop"
                                                               : "start";
  std::vector<std::string> argv = {dynid_path(), std::string("--license=") + action, "--config=" + paths::config_file()};
  if (!command.token.empty()) argv.push_back("--token=" + command.token);
  auto code = run_to_completion(argv);
  if (!code) return report_error(code.error().message());
  if (*code == kExitOk && command.action != Action::LicenseStatus) notify_daemon_of_license();
  return *code;
}

int run(const Command& command) {
  switch (command.action) {
    case Action::Help: std::cout << kUsage; return kExitOk;
    case Action::Version: std::cout << "dyni " << DYNI_VERSION << "\n"; return kExitOk;
    default: break;
  }
  if (::geteuid() != 0) {
    std::cerr << "dyni must be run as root\n";
    return kExitError;
  }
  switch (command.action) {
    case Action::Start: return do_start();
    case Action::Stop: return do_stop();
    case Action::Status: return do_status(command.json);
    case Action::Metrics: return do_metrics();
    case Action::Profile: return do_profile(command);
    case Action::Addr2Orig: return do_addr2orig(command);
    case Action::Caches: return do_caches();
    case Action::Undo: return request(protocol::cmd::kUndo, print_message);
    case Action::Redo: return request(protocol::cmd::kRedo, print_message);
    case Action::Reload: return request(protocol::cmd::kReload, print_message);
    default: return do_license(command);
  }
}

}  // namespace
}  // namespace dyni::cli

int main(int argc, char** argv) {
  using namespace dyni::cli;
  auto command = parse_args(std::vector<std::string>(argv + 1, argv + argc));
  if (!command) {
    std::cerr << "dyni: " << command.error().message() << "\n" << kUsage;
    return kExitUsage;
  }
  return run(*command);
}
