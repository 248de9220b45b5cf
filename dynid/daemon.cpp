// dynid's main loop and control-request handling.
#include "dynid/daemon.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <fstream>

#include <algorithm>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/paths.h"
#include "dynid/cache_huge_pages.h"
#include "dynid/metrics.h"

namespace dyni {
namespace {

constexpr int64_t kLicenseCheckIntervalMs = 60000;

Status open_log(const Config& config, bool to_stderr) {
  log::set_debug(config.log_debug);
  if (to_stderr) {
    log::use_stderr();
    return ok();
  }
  // The log's directory is made on first use, so dynid runs without install.sh too.
  std::string dir = config.log_file.substr(0, config.log_file.rfind('/'));
  if (!dir.empty()) {
    if (auto made = ensure_dir_p(dir, 0750); !made) return made;
  }
  return log::open_file(config.log_file);
}

// SIGTERM/SIGINT/SIGHUP arrive through a signalfd polled by the main loop.
Result<int> open_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return fail(sys_error("sigprocmask"));
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return fail(sys_error("signalfd"));
  ::signal(SIGPIPE, SIG_IGN);
  return fd;
}

int64_t now_unix_s() { return now_unix_ms() / 1000; }

// Descriptors: a perf event per CPU or thread of a target being profiled,
// /proc files kept by discovery (discovery.h), a target's memory in each
// window. systemd's soft limit (1024) is far below its hard one.
void raise_open_files_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  files.rlim_cur = files.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) log::warn("open files: the limit stays at its soft value: {}", errno_text());
}

nlohmann::json symlinks_json(const ExeMatcher& matcher) {
  nlohmann::json list = nlohmann::json::array();
  for (const ExeSymlink& s : matcher.symlinks)
    list.push_back({{"entry", s.entry}, {"link", s.link}, {"target", s.target}});
  return list;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonOptions& options) {
  if (::geteuid() != 0) return fail("dynid must be run as root");
  auto config = load_config(options.config_path);
  if (!config) return std::unexpected(config.error());
  if (auto logged = open_log(*config, options.log_to_stderr); !logged)
    return std::unexpected(logged.error());
  if (auto dir = ensure_dir(paths::run_dir(), 0700); !dir) return std::unexpected(dir.error());
  auto lock = InstanceLock::acquire(paths::lock_file());
  if (!lock) return std::unexpected(lock.error());
  auto server = ControlServer::listen(paths::run_dir(), paths::socket_file());
  if (!server) return std::unexpected(server.error());
  auto signal_fd = open_signal_fd();
  if (!signal_fd) return std::unexpected(signal_fd.error());
  auto daemon = std::unique_ptr<Daemon>(new Daemon(options, std::move(*config), std::move(*lock),
                                                   std::move(*server), *signal_fd));
  log::info("dynid {} started, pid {}, config {}, socket {}", DYNI_VERSION, ::getpid(),
            options.config_path, paths::socket_file());
  restore_lifted_thp();  // before any target is touched (cache_huge_pages.h)
  raise_open_files_limit();
  daemon->watch_processes();
  if (std::size_t gone = daemon->stale_perf_maps_.take_over_leftovers())
    log::info("perf maps: {} of processes that exited before this dynid removed, the last {} kept", gone,
              StalePerfMaps::kKeptHere);
  daemon->use_exe_list();
  daemon->check_license();
  return daemon;
}

Daemon::Daemon(DaemonOptions options, Config config, InstanceLock lock, ControlServer server,
               int signal_fd)
    : options_(std::move(options)), config_(std::move(config)), lock_(std::move(lock)),
      server_(std::move(server)), signal_fd_(signal_fd), started_unix_ms_(now_unix_ms()) {}

// Every lifecycle is asked to stop first, so that none goes on counting or
// injecting while the others are joined one by one.
Daemon::~Daemon() {
  for (auto& [pid, lc] : lifecycles_) lc->request_stop();
  for (auto& [pid, lc] : retiring_) lc->request_stop();
  ::close(signal_fd_);
}

int Daemon::run() {
  // Seen on a loaded 2-CPU VM: at nice 0 the main loop woke 3-5 s late.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kMainLoopNice) != 0)
    log::warn("main loop: stays at nice 0 ({}): under load, requests may wait", errno_text());
  int64_t stop_deadline = 0;
  while (true) {
    int64_t now = now_mono_ms();
    if (stopping_) {
      // Let replies (the "stop" answer itself) reach their clients, briefly.
      if (!stop_deadline) stop_deadline = now + 1000;
      if (!server_.has_pending_replies() || now >= stop_deadline) break;
    }
    if (!stopping_ && now >= next_scan_ms_) {
      scan();
      warn_if_slow("a scan of /proc", now);
      next_scan_ms_ = now + config_.scan_interval_ms;
    }
    std::vector<pollfd> fds = server_.poll_fds();
    fds.push_back({signal_fd_, POLLIN, 0});
    const int timeout = poll_timeout_ms(now);
    const int64_t polled = now_mono_ms();
    int ready = ::poll(fds.data(), fds.size(), timeout);
    // Woken long after its timeout: no CPU for dynid (a loaded host).
    if (ready == 0) warn_if_slow("waking from poll past its timeout", polled + timeout);
    if (ready < 0 && errno != EINTR) {
      log::error("poll failed: {}", errno_text());
      return 1;
    }
    if (ready <= 0) continue;
    if (fds.back().revents) {
      const int64_t signalled = now_mono_ms();
      on_signal();
      warn_if_slow("a signal", signalled);
    }
    fds.pop_back();
    const int64_t served = now_mono_ms();
    server_.serve(fds, [this](const protocol::Request& r) { return handle(r); });
    warn_if_slow("serving the control socket", served);
  }
  if (!config_.metrics_textfile.empty()) remove_textfile(config_.metrics_textfile);  // no stale dyni_daemon_up 1
  log::info("dynid stopped (targets keep their current code)");
  return 0;
}

// The main loop answers -status; anything in it that takes long keeps every
// client waiting, and is named in the log (DYNID-WARN main loop:).
void Daemon::warn_if_slow(const char* what, int64_t since_ms) {
  const int64_t took = now_mono_ms() - since_ms;
  if (took >= kSlowLoopMs) log::warn("main loop: {} took {} ms (requests wait meanwhile)", what, took);
}

int Daemon::poll_timeout_ms(int64_t now) {
  int until_scan = static_cast<int>(std::max<int64_t>(0, next_scan_ms_ - now));
  int until_expiry = server_.expire(now);
  int timeout = until_expiry < 0 ? until_scan : std::min(until_scan, until_expiry);
  return stopping_ ? std::min(timeout, 50) : timeout;
}

// The kernel's process events let each scan read only the processes that
// forked, exec'd or exited (discovery.h); without them it reads them all.
void Daemon::watch_processes() {
  if (options_.proc_root != "/proc") return;  // a test's fake /proc: its pids are not the kernel's
  auto watch = ExecWatch::open();
  if (!watch) {
    log::info("discovery: no process events from the kernel ({}): each scan reads every process",
              watch.error().message());
    return;
  }
  identities_ = ProcessIdentities(std::move(*watch));
  log::info("discovery: process events from the kernel's proc connector: a scan reads only the processes that changed");
}

void Daemon::scan() {
  if (now_mono_ms() >= next_license_check_ms_) check_license();
  targets_.reconcile(discover(exe_matcher_, options_.proc_root, ::getpid(), &identities_), now_mono_ms());
  targets_.advance({config_.busy_threshold_percent, config_.busy_window_ms}, license_.active);
  sync_lifecycles();
  keep_groups_undone();
  stale_perf_maps_.sweep(identities_.listed());
  if (now_mono_ms() >= next_metrics_ms_) {
    write_metrics_textfile();
    next_metrics_ms_ = now_mono_ms() + kMetricsIntervalMs;
  }
}

// The node_exporter textfile (metrics.h), only where its directory exists:
// dynid creates no directory for a collector that is not installed.
void Daemon::write_metrics_textfile() {
  const std::string& path = config_.metrics_textfile;
  if (path.empty()) return;
  struct stat dir{};
  const std::string parent = path.substr(0, path.rfind('/'));
  if (::stat(parent.empty() ? "/" : parent.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode)) return;
  auto written = write_textfile(path, prometheus_metrics(status().data, ::time(nullptr)));
  if (!written && !metrics_warned_) log::warn("metrics: {}: {}", path, written.error().message());
  metrics_warned_ = !written;
}

// Starts a lifecycle for each newly profiling target; ends those whose target
// exited, was replaced (pid reuse) or left the pipeline (e.g. unlicensed).
void Daemon::sync_lifecycles() {
  std::map<pid_t, Target> live;
  for (Target& t : targets_.snapshot()) live.emplace(t.pid, std::move(t));
  for (auto it = lifecycles_.begin(); it != lifecycles_.end();) {
    auto t = live.find(it->first);
    // Unsupported/failed targets keep their lifecycle (finished) so that
    // -profile still answers; only departure or the license gate ends it.
    // A waiting target's adoption check runs to its end.
    bool same = t != live.end() && t->second.start_time == it->second->start_time() &&
                t->second.image == it->second->image();  // else replaced, or exec'd
    bool in_pipeline = t != live.end() && t->second.state != TargetState::Waiting && t->second.state != TargetState::Unlicensed;
    // An adopt-only lifecycle runs to its end; then it stays only if it found
    // a cache (else a busy target gets a full lifecycle at the next scan).
    bool keep = same && (it->second->adopt_only() ? !it->second->finished() || it->second->adopted() : in_pipeline);
    if (keep) {
      ++it;
      continue;
    }
    // Gone, replaced or exec'd (not merely out of the pipeline): its perf
    // map stays for perf report until the pid is another process's.
    if (!same && it->second->has_perf_map())
      if (std::size_t gone = stale_perf_maps_.exited(it->first, it->second->start_time(), it->second->image(),
                                                     it->second->perf_map_here()))
        log::debug("perf maps: {} of exited processes removed, the last {} kept", gone, StalePerfMaps::kKeptHere);
    it->second->request_stop();
    retiring_.insert_or_assign(it->first, std::move(it->second));
    it = lifecycles_.erase(it);
  }
  std::erase_if(retiring_, [](const auto& r) { return r.second->finished(); });
  std::erase_if(adoption_checked_, [&](const auto& id) {
    auto t = live.find(id.first);
    return t == live.end() || t->second.start_time != id.second;
  });
  std::size_t adopting = 0;  // adoption checks under way
  for (const auto& [pid, lc] : lifecycles_) adopting += lc->adopt_only() && !lc->finished();
  // Oldest first: under a stream of new processes none waits for ever.
  std::vector<const Target*> by_age;
  for (const auto& [pid, t] : live) by_age.push_back(&t);
  std::stable_sort(by_age.begin(), by_age.end(), [](const Target* a, const Target* b) { return a->start_time < b->start_time; });
  for (const Target* target : by_age) {
    const pid_t pid = target->pid;
    const Target& t = *target;
    if (lifecycles_.count(pid) || retiring_.count(pid)) continue;
    if (t.state == TargetState::Profiling) {
      lifecycles_.emplace(pid, std::make_unique<TargetLifecycle>(t, targets_, recorder_options(), dynimize_options()));
    } else if ((t.state == TargetState::Waiting || t.state == TargetState::Unlicensed) && t.observed_ms > 0 &&
               adopting < kMaxAdoptionChecks && adoption_checked_.insert({pid, t.start_time}).second) {
      ++adopting;
      // Idle (or the license lapsed), but maybe dynimized by an earlier
      // dynid: -undo must reach it. Adopting optimizes nothing. Only once
      // seen in two scans: under pgbench -C a backend per connection lives
      // for milliseconds, and a check costs a few ms of system calls.
      auto parent = lifecycles_.find(t.ppid);
      const bool same_group = parent != lifecycles_.end() && live.contains(t.ppid) && live.at(t.ppid).group == t.group;
      lifecycles_.emplace(pid, std::make_unique<TargetLifecycle>(
                                   t, targets_, recorder_options(), dynimize_options(), /*adopt_only=*/true,
                                   same_group ? parent->second->copies_for_children() : std::vector<ParentCopies>{}));
    }
  }
}

DynimizeOptions Daemon::dynimize_options() const {
  return {config_.dynimize, config_.counting, std::chrono::seconds(config_.counting_min_seconds),
          std::chrono::seconds(config_.counting_max_seconds), config_.counting_duty_percent,
          config_.copy_usdt_functions, static_cast<unsigned>(config_.loop_alignment), config_.probe_safe_entries,
          config_.entry_pads, config_.all_hot_modules, static_cast<uint64_t>(config_.small_cache_kib) << 10,
          config_.min_module_percent / 100.0};
}

profiler::RecorderOptions Daemon::recorder_options() const {
  profiler::RecorderOptions o;
  o.sampler.frequency_hz = config_.profile_frequency_hz;
  o.max_seconds = config_.profile_max_seconds;
  o.min_samples = static_cast<uint64_t>(config_.profile_min_samples);
  return o;
}

void Daemon::check_license() {
  license::LicenseState next = license::current(config_, now_unix_s());
  if (next.summary != license_.summary)
    (next.active ? log::info("license {}", next.summary) : log::warn("license {}", next.summary));
  license_ = next;
  next_license_check_ms_ = now_mono_ms() + kLicenseCheckIntervalMs;
}

// Resolves [exeList]'s names through symlinks (at start and each reload, so a
// package installed meanwhile is seen after dyni -reload) and logs what each
// name also matches.
void Daemon::use_exe_list() {
  exe_matcher_ = resolve_exe_list(config_.exe_list, paths::bin_dirs());
  for (const ExeSymlink& s : exe_matcher_.symlinks)
    log::info("exeList: {} also matches {} ({} -> {})", s.entry, s.target, s.link, s.target);
}

void Daemon::on_signal() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof info) == sizeof info) {
    if (info.ssi_signo == SIGHUP) {
      if (auto r = reload("SIGHUP"); !r) log::error("reload failed, keeping the old config: {}", r.error().message());
    } else {
      log::info("received signal {}, stopping", info.ssi_signo);
      stopping_ = true;
    }
  }
}

// Re-reads the config; on error keeps the running one. Targets keep their state.
Status Daemon::reload(const std::string& why) {
  auto config = load_config(options_.config_path);
  if (!config) return std::unexpected(config.error());
  if (config->log_file != config_.log_file || config->log_debug != config_.log_debug) {
    if (auto logged = open_log(*config, options_.log_to_stderr); !logged)
      return std::unexpected(logged.error());
  } else if (auto reopened = log::reopen(); !reopened) {
    return std::unexpected(reopened.error());
  }
  config_ = std::move(*config);
  log::info("config reloaded from {} ({}): {} executables listed", options_.config_path, why,
            config_.exe_list.size());
  use_exe_list();
  check_license();
  next_scan_ms_ = 0;  // apply a changed [exeList] at once
  return ok();
}

// A bug in answering one request must not end dynid (its targets would
// lose -undo): it is answered as an error.
protocol::Response Daemon::handle(const protocol::Request& request) {
  try {
    return answer(request);
  } catch (const std::exception& e) {
    log::error("control request {}: internal error: {}", request.command, e.what());
    return protocol::error_response(std::string("internal error: ") + e.what());
  }
}

protocol::Response Daemon::answer(const protocol::Request& request) {
  namespace cmd = protocol::cmd;
  const std::string& c = request.command;
  log::debug("control request: {}", c);
  if (c == cmd::kPing) return {true, "pong", {{"pid", ::getpid()}}};
  if (c == cmd::kStatus) {
    auto brief = request.args.find("brief");
    if (brief != request.args.end() && !brief->is_boolean())
      return protocol::error_response("status's \"brief\" must be true or false");
    return status(brief != request.args.end() && brief->get<bool>());
  }
  if (c == cmd::kProfile) return profile(request);
  if (c == cmd::kStop) {
    log::info("stop requested over the control socket");
    stopping_ = true;
    return {true, "dyni stopped", {}};
  }
  if (c == cmd::kReload) {
    if (auto r = reload("dyni -reload"); !r) return protocol::error_response(r.error().message());
    return {true, "config reloaded", {}};
  }
  if (c == cmd::kUndo || c == cmd::kRedo) return undo_or_redo(c == cmd::kUndo);
  if (c == cmd::kLicenseChanged) {
    check_license();
    next_scan_ms_ = 0;
    return {true, "license " + license_.summary, {{"active", license_.active}}};
  }
  return protocol::error_response("unknown command \"" + c + "\"");
}

namespace {

// dynid's own CPU time (user and system) and resident memory, for -status and the metrics.
double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

uint64_t own_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

protocol::Response Daemon::status(bool brief) const {
  nlohmann::json license = {{"active", license_.active}, {"summary", license_.summary}};
  if (license_.active) {
    license["subscription"] = license_.claims.subscription;
    license["hosts"] = license_.claims.hosts;
    license["expires"] = license::format_date(license_.claims.expires);
    license["expires_unix"] = license_.claims.expires;
  }
  nlohmann::json daemon = {{"running", true},
                           {"pid", ::getpid()},
                           {"version", DYNI_VERSION},
                           {"since", format_unix_ms(started_unix_ms_)},
                           {"config", options_.config_path},
                           {"exe_list", config_.exe_list},
                           {"exe_symlinks", symlinks_json(exe_matcher_)},
                           {"busy_threshold_percent", config_.busy_threshold_percent},
                           {"busy_window_ms", config_.busy_window_ms},
                           {"cpu_seconds", own_cpu_seconds()},
                           {"rss_bytes", own_resident_bytes()}};
  if (brief)  // each target's line, the license's; no lifecycle is asked
    return {true, "dyni is running", {{"daemon", daemon}, {"license", std::move(license)}, {"targets", targets_.brief_json()}}};
  nlohmann::json targets = targets_.to_json();
  for (nlohmann::json& t : targets) {
    auto lc = lifecycles_.find(t["pid"].get<pid_t>());
    if (lc != lifecycles_.end() && lc->second->start_time() == t["start_time_ticks"].get<uint64_t>()) {
      t["dynimized"] = lc->second->injection_json();
      t["counting"] = lc->second->counting_json();
    }
  }
  return {true, "dyni is running", {{"daemon", std::move(daemon)}, {"license", std::move(license)}, {"targets", std::move(targets)}}};
}

protocol::Response Daemon::profile(const protocol::Request& request) const {
  auto pid_arg = request.args.find("pid");
  if (pid_arg == request.args.end() || !pid_arg->is_number_integer())
    return protocol::error_response("profile needs an integer \"pid\"");
  long long pid = pid_arg->get<long long>();
  auto top = request.args.value("top", 25);
  for (const Target& t : targets_.snapshot()) {
    if (t.pid != pid) continue;
    auto lc = lifecycles_.find(t.pid);
    nlohmann::json p = lc == lifecycles_.end() ? nlohmann::json(nullptr)
                                               : lc->second->profile_json(static_cast<std::size_t>(std::clamp(top, 1, 1000)));
    if (p.is_null())
      return protocol::error_response(fmt::format("{} (pid {}) is {}: no profile yet", t.name, t.pid, state_text(t)));
    return {true, "", {{"name", t.name}, {"pid", t.pid}, {"state", state_text(t)}, {"profile", p}}};
  }
  return protocol::error_response(fmt::format("pid {} is not a dyni target (see dyni -status)", pid));
}

// Undo and redo act on dynimized (resp. undone) targets, one stop window
// each; every target is answered for. Oldest first: a parent (a postmaster)
// before the members it forked, so that what it forks meanwhile already has
// the code the operator asked for. The groups undone stay undone for their
// members forked before the parent's undo and found after it.
protocol::Response Daemon::undo_or_redo(bool undo) {
  // Without a license dyni optimizes nothing: -undo still works, -redo not.
  if (!undo && !license_.active)
    return protocol::error_response("no active license: -redo would optimize again (dyni -license=status)");
  TargetState from = undo ? TargetState::Dynimized : TargetState::Undone;
  std::vector<std::string> done, failed;
  group_undo_tried_.clear();  // a new answer: each may be tried again
  std::vector<Target> targets = targets_.snapshot();
  std::stable_sort(targets.begin(), targets.end(),
                   [](const Target& a, const Target& b) { return a.start_time < b.start_time; });
  for (const Target& t : targets) {
    auto lc = lifecycles_.find(t.pid);
    bool ours = lc != lifecycles_.end() && lc->second->start_time() == t.start_time;
    if (undo && t.state == TargetState::Dynimizing && ours && t.follows) {
      // Following its group's plan (no counting to stop): undone as its
      // injection ends, with its group (keep_groups_undone).
      targets_.set_group_undone(t.group, true);
      done.push_back(fmt::format("{} (pid {}): being injected by its group's plan; undone as that ends", t.name, t.pid));
      continue;
    }
    if (undo && t.state == TargetState::Dynimizing) {  // counting: stopped, on the original code
      auto r = ours ? lc->second->stop_counting() : fail("being dynimized; run dyni -undo again in a few seconds");
      if (r) done.push_back(*r), targets_.set_group_undone(t.group, true);
      else failed.push_back(fmt::format("{} (pid {}): {}", t.name, t.pid, r.error().message()));
      continue;
    }
    if (t.state != from || !ours) continue;
    auto r = undo ? lc->second->undo() : lc->second->redo();
    if (r) {
      done.push_back(*r);
      targets_.set_group_undone(t.group, undo);
    } else {
      failed.push_back(fmt::format("{} (pid {}): {}", t.name, t.pid, r.error().message()));
      log::warn("target {} pid {}: {}", t.name, t.pid, r.error().message());
    }
  }
  // Processes not yet checked for a cache of dyni's (a few start a second):
  // one forked by a dynimized parent may run its copies.
  std::size_t unchecked = 0;
  for (const Target& t : targets)
    unchecked += (t.state == TargetState::Waiting || t.state == TargetState::Unlicensed) && !lifecycles_.contains(t.pid) &&
                 !adoption_checked_.contains({t.pid, t.start_time});
  if (undo && unchecked)
    done.push_back(fmt::format("{} processes not yet checked for dyni's code (a few are checked a second): run dyni "
                               "-undo again in a few seconds", unchecked));
  if (done.empty() && failed.empty())
    return {true, undo ? "nothing to undo: no target is dynimized"
                       : "nothing to redo: no target has been undone", {}};
  std::string text;
  for (const std::string& line : done) text += (text.empty() ? "" : "\n") + line;
  for (const std::string& line : failed) text += (text.empty() ? "" : "\n") + line;
  nlohmann::json data = {{"done", done}, {"failed", failed}};
  if (!failed.empty()) return {false, text, data};
  return {true, text, data};
}

// A member of a group that dyni -undo undid, adopted dynimized since (forked
// from its parent before the parent's undo, found after it): undone too.
void Daemon::keep_groups_undone() {
  const std::vector<Target> targets = targets_.snapshot();
  std::erase_if(group_undo_tried_, [&](const auto& id) {
    return std::none_of(targets.begin(), targets.end(),
                        [&](const Target& t) { return t.pid == id.first && t.start_time == id.second; });
  });
  for (const Target& t : targets) {
    if (t.state != TargetState::Dynimized || !targets_.group_undone(t.group)) continue;
    auto lc = lifecycles_.find(t.pid);
    if (lc == lifecycles_.end() || lc->second->start_time() != t.start_time || !lc->second->finished()) continue;
    if (!group_undo_tried_.insert({t.pid, t.start_time}).second) continue;  // a failed undo is not retried each scan
    Result<std::string> r = fail("");
    try {  // a bug must cost this target its undo, not dynid its life
      r = lc->second->undo();
    } catch (const std::exception& e) {
      r = fail(std::string("internal error: ") + e.what());
    }
    if (r) log::info("target {} pid {}: its group was undone by dyni -undo: {}", t.name, t.pid, *r);
    else log::warn("target {} pid {}: its group was undone by dyni -undo, but: {}", t.name, t.pid, r.error().message());
  }
}

}  // namespace dyni
