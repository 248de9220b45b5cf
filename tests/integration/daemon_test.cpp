// dynid and dyni end to end: a real daemon, real CLI, real target processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <elf.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "dynid/cache_scan.h"
#include "dynid/proc_reader.h"
#include "elf/function_table.h"
#include "elf/usdt.h"
#include "jit/decoder.h"
#include "jit/entry_pads.h"
#include "jit/module_counts.h"
#include "profiler/process_maps.h"
#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

// Profile bounds that keep a target profiling for as long as a test runs.
constexpr const char* kEndlessProfiling = "profile_min_samples = 10000000\nprofile_max_seconds = 3600\n";

// perf_event descriptors a process holds (each one keeps sampling).
int perf_events_open(pid_t pid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() == "anon_inode:[perf_event]") ++n;
  }
  return n;
}

// Waits for a dyni-test-hot target to end: it exits 0 when every result it
// computed was right (3: a wrong one).
void expect_right_results_to_the_end(pid_t pid) {
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << " (3: a wrong result)";
}

// A uprobe at `pc` (link-time) of executable `path` in process `pid`, as
// bpftrace's usdt: attaches one: perf_event_open's uprobe PMU, counting hits.
// The descriptor, or -1 with errno.
int open_uprobe(pid_t pid, const std::string& path, uint64_t pc) {
  auto type = read_file("/sys/bus/event_source/devices/uprobe/type", 64);
  auto file = elf::ElfFile::open(path);
  if (!type || !file) return errno = ENOENT, -1;
  uint64_t offset = UINT64_MAX;
  for (const elf::Segment& s : file->segments())
    if (s.type == PT_LOAD && pc >= s.vaddr && pc < s.vaddr + s.filesz) offset = pc - s.vaddr + s.offset;
  if (offset == UINT64_MAX) return errno = ERANGE, -1;
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = static_cast<uint32_t>(std::stoul(*type));
  attr.config1 = reinterpret_cast<uint64_t>(path.c_str());  // the kernel copies the path in
  attr.config2 = offset;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

uint64_t hits(int fd) {
  uint64_t n = 0;
  return read(fd, &n, sizeof n) == sizeof n ? n : 0;
}

// Removes a target's perf map, which dynid leaves in /tmp (perf reads it
// after the process is gone), when a test ends, on every path.
struct RemovesPerfMap {
  pid_t pid;
  ~RemovesPerfMap() { ::unlink(("/tmp/perf-" + std::to_string(pid) + ".map").c_str()); }
};

nlohmann::json target_json(const DyniHost& host, pid_t pid) {
  for (const auto& t : host.status_json().value("targets", nlohmann::json::array()))
    if (t["pid"] == pid) return t;
  return nullptr;
}

class Daemon : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
  }
  // Starts dynid with `exe_list`, licensed, and checks the CLI's answer.
  void start(const std::vector<std::string>& exe_list, const std::string& options = kFastOptions) {
    host.write_config(exe_list, options);
    host.license_this_host();
    RunResult r = host.dyni({"-start"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(r.out, "dyni started\n");
  }
  // Starts dynid for `name`, a copy of dyni-test-hot run for `seconds` with
  // two threads, and waits until it is dynimized: the target and its file.
  void dynimized_hot(const std::string& name, const std::string& seconds, pid_t& hot, std::string& exe) {
    start({name}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
    exe = host.install_program(DYNI_TEST_HOT, name);
    hot = host.spawn({exe, seconds, "2"});
    ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 40s)) << host.state_of(hot) << host.log();
  }
  // `pid`'s state once it is "failed: ..." (or the last seen, after `timeout`).
  std::string failed_state_of(pid_t pid, std::chrono::seconds timeout) {
    std::string state;
    for (auto until = std::chrono::steady_clock::now() + timeout;
         state.rfind("failed", 0) != 0 && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100ms))
      state = host.state_of(pid);
    return state;
  }
  DyniHost host;
};

TEST_F(Daemon, StartStatusStop) {
  RunResult before = host.dyni({"-status"});
  EXPECT_EQ(before.exit_code, 3);
  EXPECT_EQ(before.out, "dyni is not running\n");
  start({"dyni-idle-a"});
  pid_t idle = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-idle-a"), "30"});
  ASSERT_TRUE(host.wait_for_state(idle, "waiting"));
  RunResult status = host.dyni({"-status"});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(status.out, "dyni is running\ndyni-idle-a, pid: " + std::to_string(idle) +
                            ", waiting\nlicense: active: subscription test-sub, 2 hosts, "
                            "expires 2099-01-01\n");
  RunResult again = host.dyni({"-start"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_EQ(again.out, "dyni is already running\n");
  pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  RunResult stop = host.dyni({"-stop"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_EQ(stop.out, "dyni stopped\n");
  // dyni reports "stopped" once dynid released its lock; the process itself
  // is gone a moment later.
  for (int i = 0; i < 100 && DyniHost::alive(daemon); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(DyniHost::alive(daemon)) << "dynid still alive 2 s after -stop";
  EXPECT_FALSE(std::filesystem::exists(host.socket_path()));
  EXPECT_TRUE(DyniHost::alive(idle)) << "stopping dyni must not touch targets";
  EXPECT_EQ(host.dyni({"-status"}).out, "dyni is not running\n");
  EXPECT_EQ(host.dyni({"-stop"}).exit_code, 3);
}

TEST_F(Daemon, SocketAndRunDirArePrivate) {
  start({"nothing-listed"});
  struct stat dir {}, sock {};
  ASSERT_EQ(stat(host.run_dir().c_str(), &dir), 0);
  ASSERT_EQ(stat(host.socket_path().c_str(), &sock), 0);
  EXPECT_EQ(dir.st_mode & 07777, 0700u);
  EXPECT_EQ(sock.st_mode & 07777, 0600u);
  EXPECT_EQ(sock.st_uid, 0u);
  EXPECT_TRUE(S_ISSOCK(sock.st_mode));
}

TEST_F(Daemon, BusyTargetGoesFromWaitingToProfilingIdleOneStaysWaiting) {
  // Still profiling when -status is read after the wait (see kEndlessProfiling).
  start({"dyni-busy", "dyni-idle"}, std::string(kFastOptions) + kEndlessProfiling);
  pid_t idle = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-idle"), "30"});
  ASSERT_TRUE(host.wait_for_state(idle, "waiting"));
  pid_t busy = host.spawn({host.install_program(DYNI_TEST_BUSY, "dyni-busy"), "30", "2"});
  ASSERT_TRUE(host.wait_for_state(busy, "profiling", 15s)) << host.state_of(busy) << host.log();
  EXPECT_EQ(host.state_of(idle), "waiting");
  auto j = host.status_json();
  for (const auto& t : j["targets"]) {
    if (t["pid"] != busy) continue;
    EXPECT_GT(t["cpu_percent"].get<double>(), 40.0);
    EXPECT_EQ(t["state"], "profiling");
    EXPECT_EQ(t["exe"], host.dir() + "/dyni-busy");
  }
  EXPECT_NE(host.log().find("-> profiling (busy:"), std::string::npos);
}

TEST_F(Daemon, JsonStatusHasTheFacts) {
  start({"dyni-idle-j"});
  pid_t idle = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-idle-j"), "30"});
  ASSERT_TRUE(host.wait_for_state(idle, "waiting"));
  auto j = host.status_json();
  EXPECT_EQ(j["running"], true);
  EXPECT_EQ(j["daemon"]["pid"], host.daemon_pid());
  EXPECT_EQ(j["daemon"]["config"], host.config_path());
  EXPECT_EQ(j["license"]["active"], true);
  EXPECT_EQ(j["license"]["subscription"], "test-sub");
  ASSERT_EQ(j["targets"].size(), 1u);
  const auto& t = j["targets"][0];
  EXPECT_EQ(t["pid"], idle);
  EXPECT_EQ(t["name"], "dyni-idle-j");
  EXPECT_EQ(t["exe"], host.dir() + "/dyni-idle-j");
  EXPECT_EQ(t["state"], "waiting");
  EXPECT_EQ(t["matched_by"], (nlohmann::json{{"entry", "dyni-idle-j"}, {"via", "basename"}}));
  EXPECT_EQ(t["reason"], "");
  EXPECT_TRUE(t["since"].get<std::string>().ends_with("Z"));
  EXPECT_GT(t["start_time_ticks"].get<long>(), 0);
  RunResult down = host.dyni({"-stop"});
  RunResult r = host.dyni({"-status", "-json"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(nlohmann::json::parse(r.out)["running"], false);
}

TEST_F(Daemon, FindsRenamedDeletedAndPathListedTargetsAndNotLookalikes) {
  std::string by_path = host.install_program(DYNI_TEST_IDLE, "listed-by-path");
  start({"dyni-renamed", "dyni-deleted", by_path, "dyni-lookalike-comm"});
  // Listed by exe basename; renames its comm to something unlisted. Two
  // spinning threads: with one, a machine busy with other work (once: five
  // compile jobs on 2 cores) can hold it under the 40 % busy threshold for
  // the whole 15 s, and the test failed although dynid was right.
  pid_t renamed = host.spawn({host.install_program(DYNI_TEST_BUSY, "dyni-renamed"), "30", "2", "other-name"});
  // Listed, and its executable file is deleted after start (as by an upgrade).
  std::string doomed = host.install_program(DYNI_TEST_IDLE, "dyni-deleted");
  pid_t deleted = host.spawn({doomed, "30"});
  // Listed by full path.
  pid_t path_listed = host.spawn({by_path, "30"});
  // Not listed: its comm copies a listed name, but its exe does not.
  pid_t lookalike = host.spawn({host.install_program(DYNI_TEST_BUSY, "unlisted-exe"), "30", "1", "dyni-lookalike-comm"});
  std::this_thread::sleep_for(200ms);
  std::filesystem::remove(doomed);
  ASSERT_TRUE(host.wait_for_state(renamed, "profiling", 15s)) << host.state_of(renamed);
  ASSERT_TRUE(host.wait_for_state(deleted, "waiting"));
  ASSERT_TRUE(host.wait_for_state(path_listed, "waiting"));
  EXPECT_EQ(host.state_of(lookalike), "");
  auto j = host.status_json();
  for (const auto& t : j["targets"]) {
    if (t["pid"] == deleted) {
      EXPECT_EQ(t["exe_deleted"], true);
    }
    if (t["pid"] == renamed) {
      EXPECT_EQ(t["name"], "dyni-renamed");
    }
  }
  std::string text = host.dyni({"-status"}).out;
  EXPECT_NE(text.find("dyni-deleted, pid: " + std::to_string(deleted) + ", waiting\n"), std::string::npos) << text;
}

TEST_F(Daemon, NewProcessesAppearAndExitedOnesDisappearWithinASecond) {
  start({"dyni-short"});
  std::string exe = host.install_program(DYNI_TEST_IDLE, "dyni-short");
  pid_t a = host.spawn({exe, "2"});  // exits by itself after 2 s
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(host.wait_for_state(a, "waiting", 1500ms)) << "not listed within 1.5 s";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  pid_t b = host.spawn({exe, "30"});
  ASSERT_TRUE(host.wait_for_state(b, "waiting", 1500ms));
  host.kill_target(b);
  ASSERT_TRUE(host.wait_for_state(b, "", 1500ms)) << "killed target still listed";
  ASSERT_TRUE(host.wait_for_state(a, "", 4s)) << "exited target still listed";
}

TEST_F(Daemon, FindsTargetsInsideAnotherMountNamespace) {
  if (system("unshare --mount true 2>/dev/null") != 0)
    GTEST_SKIP() << "cannot create mount namespaces here (unshare --mount failed)";
  start({"dyni-in-container"});
  // The executable exists only on a tmpfs mounted inside the new namespace.
  std::string inner = host.dir() + "/container-root";
  std::filesystem::create_directories(inner);
  std::string script = "mount -t tmpfs none " + inner + " && cp " + std::string(DYNI_TEST_IDLE) +
                       " " + inner + "/dyni-in-container && exec " + inner + "/dyni-in-container 30";
  pid_t shell = host.spawn({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script});
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t["pid"] == shell && t["state"] == "waiting") return true;
    return false;
  })) << host.dyni({"-status"}).out;
  EXPECT_FALSE(std::filesystem::exists(inner + "/dyni-in-container"));  // not visible from here
  auto j = host.status_json();
  std::string own_ns = std::filesystem::read_symlink("/proc/self/ns/mnt");
  EXPECT_NE(j["targets"][0]["mount_namespace"], own_ns);
}

TEST_F(Daemon, CreatesTheLogDirectoryItNeeds) {
  std::string log = host.dir() + "/var/log/dyni/dynid.log";
  host.write_raw_config("[exeList]\nx\n[options]\nlog_file = " + log + "\n");
  RunResult r = host.dyni({"-start"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(log));
}

TEST_F(Daemon, BadConfigRefusesToStartWithFileLineAndReason) {
  host.write_raw_config("[exeList]\nmariadbd\n[options]\nbusy_window_ms = 10\n");
  RunResult r = host.dyni({"-start"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "dyni: " + host.config_path() + ":4: '10' out of range [100, 600000]\n");
  EXPECT_EQ(host.dyni({"-status"}).exit_code, 3);
  host.write_raw_config("[options]\n");
  r = host.dyni({"-start"});
  EXPECT_NE(r.err.find("missing [exeList]"), std::string::npos) << r.err;
  std::filesystem::remove(host.config_path());
  r = host.dyni({"-start"});
  EXPECT_NE(r.err.find("cannot read config " + host.config_path()), std::string::npos) << r.err;
}

// Probes of dyni -start with hostile config files (issue 9): each is refused
// at once with file, line and reason.
TEST_F(Daemon, HostileConfigsAreRefusedQuicklyAndPrecisely) {
  host.write_raw_config("[exeList]\nx\n[options]\nscan_interval_ms = 500\nscan_interval_ms = 600\n");
  RunResult twice = host.dyni({"-start"});
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_EQ(twice.err, "dyni: " + host.config_path() + ":5: 'scan_interval_ms' is set twice (first on line 4)\n");
  host.write_raw_config("[exeList]\n" + std::string("\0\xff\xfe", 3) + "\n");
  RunResult raw = host.dyni({"-start"});
  EXPECT_EQ(raw.exit_code, 1);
  EXPECT_EQ(raw.err, "dyni: " + host.config_path() + ":2: contains a NUL byte\n");
  // DYNI_CONFIG naming a device: it used to be read until killed.
  auto t0 = std::chrono::steady_clock::now();
  RunResult zero = host.run({"/usr/bin/env", "DYNI_CONFIG=/dev/zero", DYNI_TEST_DYNI, "-start"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_EQ(zero.err, "dyni: cannot read config /dev/zero: it is a character device, not a regular file\n");
  EXPECT_EQ(host.dyni({"-status"}).exit_code, 3);
}

// Debian installs /usr/bin/redis-server as a symlink to redis-check-rdb, so a
// running redis's /proc/PID/exe names redis-check-rdb. Laid out the same way
// in the host's binary directory (DYNI_BIN_DIRS), the listed name must find it.
TEST_F(Daemon, FindsAListedNameThroughItsSymlinkAndSaysHow) {
  std::string real = host.install_program(DYNI_TEST_IDLE, "bin/dyni-check-rdb");
  std::string link = host.bin_dir() + "/dyni-redis-server";
  ASSERT_EQ(symlink("dyni-check-rdb", link.c_str()), 0);
  start({"dyni-redis-server", "dyni-plain"});
  pid_t linked = host.spawn({link, "30"});  // started by the listed name, as systemd does
  pid_t plain = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-plain"), "30"});
  ASSERT_TRUE(host.wait_for_state(linked, "waiting")) << host.log();
  ASSERT_TRUE(host.wait_for_state(plain, "waiting"));
  auto j = host.status_json();
  for (const auto& t : j["targets"]) {
    if (t["pid"] == linked) {
      EXPECT_EQ(t["name"], "dyni-check-rdb");
      EXPECT_EQ(t["matched_by"], (nlohmann::json{{"entry", "dyni-redis-server"}, {"via", link + " -> " + real}}));
    }
    if (t["pid"] == plain) {
      EXPECT_EQ(t["matched_by"], (nlohmann::json{{"entry", "dyni-plain"}, {"via", "basename"}}));
    }
  }
  EXPECT_EQ(j["daemon"]["exe_symlinks"],
            (nlohmann::json::array({{{"entry", "dyni-redis-server"}, {"link", link}, {"target", real}}})));
  EXPECT_NE(host.log().find("exeList: dyni-redis-server also matches " + real), std::string::npos);
}

// A package installed after dynid started is seen at dyni -reload.
TEST_F(Daemon, ReloadResolvesTheSymlinksAgain) {
  start({"dyni-late-server"});
  pid_t late = host.spawn({host.install_program(DYNI_TEST_IDLE, "bin/dyni-late-check"), "30"});
  std::this_thread::sleep_for(500ms);  // five scans
  EXPECT_EQ(host.state_of(late), "") << "no symlink yet";
  std::string link = host.bin_dir() + "/dyni-late-server";
  ASSERT_EQ(symlink("dyni-late-check", link.c_str()), 0);
  ASSERT_EQ(host.dyni({"-reload"}).exit_code, 0);
  ASSERT_TRUE(host.wait_for_state(late, "waiting")) << host.log();
}

// Inside a container the host's symlinks mean nothing: a file at the same
// path as the host's link target is another file, and is not listed; the
// container's listed basenames still are.
TEST_F(Daemon, HostSymlinksDoNotListFilesInsideAnotherMountNamespace) {
  if (system("unshare --mount true 2>/dev/null") != 0)
    GTEST_SKIP() << "cannot create mount namespaces here (unshare --mount failed)";
  std::string real = host.install_program(DYNI_TEST_IDLE, "bin/dyni-ns-check");
  ASSERT_EQ(symlink("dyni-ns-check", (host.bin_dir() + "/dyni-ns-server").c_str()), 0);
  start({"dyni-ns-server", "dyni-ns-listed"});
  // In the container, a tmpfs over bin/ holds its own dyni-ns-check (no link).
  std::string bin = host.bin_dir(), idle = DYNI_TEST_IDLE;
  std::string script = "mount -t tmpfs none " + bin + " && cp " + idle + " " + bin + "/dyni-ns-check && cp " +
                       idle + " " + bin + "/dyni-ns-listed && (" + bin + "/dyni-ns-check 10 &) && exec " + bin +
                       "/dyni-ns-listed 30";
  pid_t shell = host.spawn({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script});
  ASSERT_TRUE(host.wait_for_state(shell, "waiting")) << host.dyni({"-status"}).out;
  std::this_thread::sleep_for(300ms);  // three more scans
  auto j = host.status_json();
  ASSERT_EQ(j["targets"].size(), 1u) << j.dump();
  EXPECT_EQ(j["targets"][0]["name"], "dyni-ns-listed");
  EXPECT_EQ(j["targets"][0]["matched_by"]["via"], "basename");
  // The host's own file behind the link is still found through it.
  pid_t on_host = host.spawn({real, "30"});
  ASSERT_TRUE(host.wait_for_state(on_host, "waiting"));
}

TEST_F(Daemon, ReloadAndSighupRereadTheConfigKeepingState) {
  // The busy target must still be profiling when its state is checked seconds
  // later: with the default profile bounds dynid's own profiling could find
  // its hot set first and move it on to dynimizing.
  const std::string options = std::string(kFastOptions) + kEndlessProfiling;
  start({"dyni-first"}, options);
  pid_t first = host.spawn({host.install_program(DYNI_TEST_BUSY, "dyni-first"), "30"});
  pid_t second = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-second"), "30"});
  ASSERT_TRUE(host.wait_for_state(first, "profiling", 15s));
  EXPECT_EQ(host.state_of(second), "");

  host.write_config({"dyni-first", "dyni-second"}, options);
  RunResult r = host.dyni({"-reload"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "config reloaded\n");
  ASSERT_TRUE(host.wait_for_state(second, "waiting"));
  EXPECT_EQ(host.state_of(first), "profiling") << "reload must keep targets' state";

  // A bad config on reload is refused; the running one stays.
  host.write_raw_config("[exeList]\n[options]\nbogus = 1\n");
  r = host.dyni({"-reload"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(":3: unknown key 'bogus' in [options]"), std::string::npos) << r.err;
  EXPECT_EQ(host.state_of(second), "waiting");

  // SIGHUP does the same as -reload.
  host.write_config({"dyni-first"}, options);
  kill(host.daemon_pid(), SIGHUP);
  ASSERT_TRUE(host.wait_for_state(second, "", 3s));
  EXPECT_EQ(host.state_of(first), "profiling");
  EXPECT_NE(host.log().find("config reloaded from " + host.config_path() + " (SIGHUP)"), std::string::npos);
}

TEST_F(Daemon, ProfilesABusyTargetUntilItsHotSetIsStable) {
  // dynimize = false: the jit's plan is made and shown, nothing is injected.
  host.write_config({"dyni-hot", "dyni-idle-p"},
                    std::string(kFastOptions) + "profile_min_samples = 1000\nprofile_max_seconds = 20\ndynimize = false\n");
  host.license_this_host();
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  pid_t idle = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-idle-p"), "30"});
  pid_t hot = host.spawn({host.install_program(DYNI_TEST_HOT, "dyni-hot"), "30", "2"});
  ASSERT_TRUE(host.wait_for_state(hot, "profiling", 10s)) << host.state_of(hot);
  ASSERT_TRUE(host.wait_for_state(hot, "dynimizing", 20s)) << host.state_of(hot) << host.log();
  RunResult text = host.dyni({"-profile=" + std::to_string(hot)});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("dyni-hot, pid: " + std::to_string(hot) + ", dynimizing\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(stable)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("unsigned long hot_work<0>(unsigned long)"), std::string::npos) << text.out;
  RunResult json = host.dyni({"-profile=" + std::to_string(hot), "-json"});
  auto j = nlohmann::json::parse(json.out);
  EXPECT_GE(j["profile"]["samples"].get<int>(), 1000);
  EXPECT_EQ(j["profile"]["threads_seen"], 2);
  EXPECT_EQ(j["profile"]["stable"], true);
  EXPECT_EQ(j["profile"]["top"][0]["module"], host.dir() + "/dyni-hot");
  RunResult waiting = host.dyni({"-profile=" + std::to_string(idle)});
  EXPECT_EQ(waiting.exit_code, 1);
  EXPECT_EQ(waiting.err, "dyni: dyni-idle-p (pid " + std::to_string(idle) + ") is waiting: no profile yet\n");
  RunResult stranger = host.dyni({"-profile=1"});
  EXPECT_EQ(stranger.err, "dyni: pid 1 is not a dyni target (see dyni -status)\n");
  EXPECT_NE(host.log().find("profiling -> dynimizing (hot set found)"), std::string::npos);
  EXPECT_EQ(perf_events_open(host.daemon_pid()), 0) << "sampling must stop once profiled";
  EXPECT_TRUE(text_equals_file(hot, host.dir() + "/dyni-hot")) << "dynimize = false must not write";
  // The jit plans the cache for the hot set.
  nlohmann::json plan;
  for (int i = 0; i < 100 && plan.is_null(); ++i, std::this_thread::sleep_for(100ms))
    plan = nlohmann::json::parse(host.dyni({"-profile=" + std::to_string(hot), "-json"}).out)["profile"].value("jit", nlohmann::json());
  ASSERT_FALSE(plan.is_null()) << host.log();
  EXPECT_FALSE(plan.contains("error")) << plan.dump();
  EXPECT_GE(plan["functions"].get<int>(), 20) << "most of dyni-hot's 24 hot functions are in the 99 % set: " << plan.dump();
  EXPECT_GE(plan["sampled_cpu_accepted_percent"].get<double>(), 95.0) << plan.dump();
  EXPECT_GT(plan["cache_bytes"].get<int>(), 0);
  EXPECT_NE(host.log().find("jit: "), std::string::npos);
  EXPECT_NE(host.dyni({"-profile=" + std::to_string(hot)}).out.find("jit plan: "), std::string::npos);
}

// Any process can be named like a database; a broken binary must not hurt dynid.
TEST_F(Daemon, AMalformedExecutableMakesItsTargetUnsupported) {
  start({"dyni-malformed", "dyni-hot-ok"});
  // The kernel runs it (program headers intact); its section table points past the end.
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-malformed");
  std::fstream f(exe, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t bogus = 0x7fffffff00ull;
  f.seekp(0x28);  // e_shoff
  f.write(reinterpret_cast<const char*>(&bogus), sizeof bogus);
  f.close();
  pid_t bad = host.spawn({exe, "30", "1"});
  pid_t good = host.spawn({host.install_program(DYNI_TEST_HOT, "dyni-hot-ok"), "30", "1"});
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t["pid"] == bad) return t["state"] == "unsupported";
    return false;
  }, 15s)) << host.dyni({"-status"}).out;
  std::string status = host.state_of(bad);
  EXPECT_NE(status.find("unsupported: "), std::string::npos);
  EXPECT_NE(status.find("bad section header table"), std::string::npos) << status;
  EXPECT_TRUE(DyniHost::alive(bad));
  ASSERT_TRUE(host.wait_for_state(good, "dynimized", 30s)) << host.state_of(good) << host.log();
  EXPECT_EQ(perf_events_open(host.daemon_pid()), 0) << "no sampling left behind";
}

// The whole pipeline on a real target: profiled, injected, undone, redone;
// a new dynid finds the cache's record and adopts the target instead of
// injecting it twice, and undoes it from the record alone. The target checks
// every result it computes (WRONG and exit 3 on a difference).
// Each injection logs one line an operator can act on (issue 23 item 7):
// functions, cache bytes, patch windows, seconds; its figures are the ones
// -status -json reports. The counting injection before it says as much.
void expect_injection_log_lines(const std::string& log, pid_t pid, const nlohmann::json& dynimized) {
  const std::string who = fmt::format(" pid {}: ", pid);
  std::vector<std::string> injected, counting;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(who + "dynimized: ") != std::string::npos) injected.push_back(line);
    if (line.find(who + "counting: ") != std::string::npos) counting.push_back(line);
  }
  ASSERT_EQ(injected.size(), 1u) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(injected[0], m,
                                std::regex(R"(dynimized: (\d+) functions of \S+ patched, .* (\d+) bytes of code at 0x[0-9a-f]+ .*; )"
                                           R"((\d+) patch windows, longest stop [0-9.]+ ms; ([0-9.]+) s profiling, )"
                                           R"(([0-9.]+) s counting and jit)")))
      << injected[0];
  EXPECT_EQ(std::stoi(m[1]), dynimized["functions_patched"].get<int>()) << injected[0];
  EXPECT_EQ(std::stoi(m[2]), dynimized["cache"]["code_bytes"].get<int>()) << injected[0];
  EXPECT_EQ(std::stoi(m[3]), dynimized["patch_windows"].get<int>()) << injected[0];
  EXPECT_NEAR(std::stod(m[4]), dynimized["seconds_profiling"].get<double>(), 0.06) << injected[0];
  ASSERT_EQ(counting.size(), 1u) << log;
  EXPECT_TRUE(std::regex_search(counting[0], std::regex(R"(counting: [1-9]\d* entries on counting copies, \d+ counter )"
                                                        R"(sites, [1-9]\d* bytes of code at 0x[0-9a-f]+; [1-9]\d* )"
                                                        R"(patch windows, longest stop [0-9.]+ ms)")))
      << counting[0];
}

TEST_F(Daemon, DynimizesABusyTargetUndoesRedoesAndANewDynidAdoptsIt) {
  const std::string options = std::string(kFastOptions) + "profile_min_samples = 1000\nprofile_max_seconds = 20\n";
  start({"dyni-hot-inj"}, options);
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-inj");
  pid_t hot = host.spawn({exe, "120", "2"});
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 40s)) << host.state_of(hot) << host.log();
  nlohmann::json d = target_json(host, hot)["dynimized"];
  ASSERT_TRUE(d.is_object()) << target_json(host, hot).dump();
  EXPECT_GE(d["functions_patched"].get<int>(), 15) << d.dump();
  EXPECT_EQ(d["adopted"], false);
  EXPECT_GT(d["cache"]["code_bytes"].get<int>(), 0);
  EXPECT_GT(d["longest_stop_ms"].get<double>(), 0.0);
  EXPECT_GT(d["seconds_profiling"].get<double>(), 0.5);
  EXPECT_GT(d["seconds_optimizing"].get<double>(), 0.0);
  EXPECT_EQ(d["frames_registered"].get<std::string>().rfind("yes", 0), 0u) << d.dump();
  EXPECT_NE(d.value("layout", ""), "") << "which block layout the copies have";
  EXPECT_FALSE(text_equals_file(hot, exe)) << "dynimized, yet the code is the file's";
  EXPECT_EQ(caches_in(hot), 1u);
  // Laid out by counts: a counting cache came first, and has ended.
  EXPECT_EQ(caches_in(hot, CacheTier::Counting), 1u);
  nlohmann::json counting = target_json(host, hot)["counting"];
  ASSERT_TRUE(counting.is_object()) << target_json(host, hot).dump();
  EXPECT_EQ(counting["phase"], "ended") << counting.dump();
  EXPECT_GT(counting["counts_total"].get<uint64_t>(), 0u) << counting.dump();
  EXPECT_GE(counting["counter_sites_off"].get<std::size_t>() + 8, counting["counter_sites"].get<std::size_t>())
      << "every counter site off but those at a page's edge: " << counting.dump();
  EXPECT_NE(d.value("layout", "").find("by counts"), std::string::npos) << d.dump();
  EXPECT_NE(host.dyni({"-status"}).out.find(", dynimized\n"), std::string::npos);
  expect_injection_log_lines(host.log(), hot, d);
  // The counts are saved for dyni-scan --counts, under the listed name.
  ASSERT_TRUE(counting["counts_file"].is_string()) << counting.dump();
  EXPECT_EQ(counting["counts_file"].get<std::string>(), host.dir() + "/state/counts/dyni-hot-inj.json");
  auto saved = read_file(counting["counts_file"].get<std::string>(), 64 << 20);
  ASSERT_TRUE(saved) << saved.error().message();
  auto counts = jit::ModuleCounts::from_json(nlohmann::json::parse(*saved));
  ASSERT_TRUE(counts) << counts.error().message();
  EXPECT_FALSE(counts->build_id.empty());
  EXPECT_GE(counts->functions.size(), 15u);
  EXPECT_GT(counts->seconds, 0.0);
  // -profile tells what the counts say of the original code and of the layout.
  nlohmann::json by_counts =
      nlohmann::json::parse(host.dyni({"-profile=" + std::to_string(hot), "-json"}).out)["profile"]["layout_by_counts"];
  ASSERT_TRUE(by_counts.is_object()) << by_counts.dump();
  for (const char* which : {"original", "laid_out"}) {
    EXPECT_GT(by_counts[which]["instructions"].get<uint64_t>(), 0u) << which;
    EXPECT_GT(by_counts[which]["pages_99"].get<std::size_t>(), 0u) << which;
    EXPECT_GT(by_counts[which]["hot_bytes"].get<uint64_t>(), 0u) << which;
  }
  EXPECT_EQ(by_counts["original"]["instructions"], by_counts["laid_out"]["instructions"]) << "the same counts";
  EXPECT_GT(by_counts["original"]["ext_tsp"].get<double>(), 0.0);
  EXPECT_NE(host.dyni({"-profile=" + std::to_string(hot)}).out.find("what the counts say"), std::string::npos);
  // The plan reported is the one injected: the jit did not plan the hot set
  // a second time just for the report.
  nlohmann::json plan =
      nlohmann::json::parse(host.dyni({"-profile=" + std::to_string(hot), "-json"}).out)["profile"]["jit"];
  EXPECT_EQ(plan.value("injected", false), true) << plan.dump();
  EXPECT_EQ(plan.value("functions", 0), d["functions_copied"].get<int>()) << plan.dump();
  EXPECT_GE(plan.value("sampled_cpu_accepted_percent", 0.0), 90.0) << plan.dump();
  EXPECT_EQ(host.log().find("(not injected yet)"), std::string::npos) << host.log();
  EXPECT_NE(host.dyni({"-profile=" + std::to_string(hot)}).out.find("entries to patch (injected)"), std::string::npos);

  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.err;
  EXPECT_NE(undo.out.find("original code restored"), std::string::npos) << undo.out;
  EXPECT_EQ(host.state_of(hot), "undone");
  EXPECT_TRUE(text_equals_file(hot, exe)) << "undo must restore every byte";
  // I8: the cache stays, and says so (its frames with it).
  d = target_json(host, hot)["dynimized"];
  EXPECT_EQ(caches_in(hot), 1u);
  EXPECT_EQ(d["cache"]["unmapped"], false) << d.dump();
  EXPECT_NE(d["cache"].value("kept_because", "").find("until the process exits"), std::string::npos) << d.dump();
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.err << redo.out;
  EXPECT_EQ(host.state_of(hot), "dynimized");
  EXPECT_FALSE(text_equals_file(hot, exe));

  // A new dynid: the record in the cache says the target is dynimized. Its
  // busy threshold is out of reach, so the target is never profiled: it is
  // recognised all the same, so that -undo reaches it.
  host.dyni({"-stop"});
  ASSERT_TRUE(DyniHost::alive(hot));
  EXPECT_FALSE(text_equals_file(hot, exe)) << "stopping dynid must leave targets as they are";
  start({"dyni-hot-inj"}, "[options]\nbusy_threshold_percent = 100000\nbusy_window_ms = 600\nscan_interval_ms = 100\n");
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 20s)) << host.state_of(hot) << host.log();
  d = host.dynimized_with_files(hot);
  EXPECT_EQ(d["adopted"], true) << d.dump();
  // The files the first dynid wrote for perf and gdb still serve: named again.
  EXPECT_EQ(d.value("perf_map", ""), fmt::format("/tmp/perf-{}.map", hot)) << d.dump();
  EXPECT_EQ(d.value("gdb_command", "").rfind("add-symbol-file ", 0), 0u) << d.dump();
  EXPECT_EQ(caches_in(hot), 1u) << "injected twice";
  EXPECT_EQ(caches_in(hot, CacheTier::Counting), 1u) << "counted twice";
  undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.err;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "undo from the record must restore every byte";
  EXPECT_EQ(host.state_of(hot), "undone");

  // The target ran its whole time with right results.
  kill(hot, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(hot, &status, 0), hot);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
}

// A program whose hot code is a plugin it dlopens and dlcloses in a loop
// (issue 22 item 4): dynid optimizes the plugin, every round computes the
// same sum through the unloads and loads that follow (the copies of an
// unloaded plugin are never reached: its patched pages go with it), and
// -undo and -redo touch only the plugin as it is loaded now.
TEST_F(Daemon, AHotPluginLoadedAndUnloadedInALoopIsDynimizedAndComputesTheSame) {
  const std::string name = "dyni-plugin-host";
  start({name}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
  const std::string exe = host.install_program(DYNI_TEST_PLUGIN_HOST, name);
  const std::string out = host.dir() + "/plugin.out";
  pid_t target = host.spawn({"/bin/sh", "-c", "exec '" + exe + "' '" DYNI_TEST_PLUGIN "' 700 > '" + out + "'"});
  auto rounds = [&] {
    std::ifstream in(out);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  auto wait_rounds = [&](std::size_t n) {
    for (int i = 0; i < 300 && rounds().size() < n; ++i) std::this_thread::sleep_for(100ms);
    return rounds().size() >= n;
  };
  ASSERT_TRUE(host.wait_for_state(target, "dynimized", 60s)) << host.state_of(target) << host.log();
  nlohmann::json d = target_json(host, target)["dynimized"];
  std::printf("plugin: %s\n", d.dump().c_str());
  EXPECT_NE(d.value("module", "").find("libdyni-test-plugin.so"), std::string::npos) << d.dump();
  EXPECT_GE(d.value("functions_patched", 0), 1) << d.dump();
  EXPECT_EQ(d.value("module_loaded", false), true) << d.dump();
  // Unloaded and loaded again, several times, with the cache in place.
  std::size_t at_patch = rounds().size();
  ASSERT_TRUE(wait_rounds(at_patch + 4)) << "the host stopped its rounds";
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_TRUE(text_equals_file(target, DYNI_TEST_PLUGIN)) << "undo leaves the plugin as its file";
  // Patches the plugin where it is loaded now: glibc loads it again where it was.
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  ASSERT_TRUE(wait_rounds(rounds().size() + 4)) << "the host stopped its rounds";
  EXPECT_EQ(host.dyni({"-undo"}).exit_code, 0);
  ASSERT_TRUE(wait_rounds(rounds().size() + 2)) << "the host stopped its rounds";
  ASSERT_TRUE(DyniHost::alive(target));
  // Unloaded for good: -status says its copies are reached no more.
  ::kill(target, SIGUSR1);
  for (int i = 0; i < 100 && (rounds().empty() || rounds().back() != "unloaded"); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(rounds().back(), "unloaded");
  d = target_json(host, target)["dynimized"];
  EXPECT_EQ(d.value("module_loaded", true), false) << d.dump();
  ::kill(target, SIGKILL);
  ::waitpid(target, nullptr, 0);
  std::set<std::string> loads;
  for (const std::string& line : rounds()) {
    ASSERT_EQ(line.find("WRONG"), std::string::npos) << line;
    if (line == "unloaded") continue;
    loads.insert(line.substr(line.find(" load ") + 6, line.find(" sum ") - line.find(" load ") - 6));
  }
  std::printf("plugin: %zu rounds, loaded at %zu addresses, %zu rounds after the patch\n", rounds().size(),
              loads.size(), rounds().size() - at_patch);
}

// A host whose license lapsed (or an operator removing dyni for it): the
// new dynid optimizes nothing (-redo is refused), but still adopts what an
// earlier one dynimized, so that -undo reaches it.
TEST_F(Daemon, ADynidWithoutALicenseStillAdoptsAndUndoes) {
  pid_t hot = 0;
  std::string exe;
  ASSERT_NO_FATAL_FAILURE(dynimized_hot("dyni-hot-lapsed", "25", hot, exe));
  ASSERT_EQ(host.dyni({"-stop"}).exit_code, 0);
  ASSERT_EQ(::unlink((host.dir() + "/state/license.json").c_str()), 0);
  RunResult again = host.dyni({"-start"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 20s)) << host.state_of(hot) << host.log();
  EXPECT_EQ(target_json(host, hot)["dynimized"]["adopted"], true);
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "undone without a license";
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 1) << redo.out << redo.err;
  EXPECT_NE((redo.out + redo.err).find("no active license"), std::string::npos) << redo.out << redo.err;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "-redo without a license optimized";
  expect_right_results_to_the_end(hot);
}

// After a package downgrade the dynid that starts is older than the cache
// it finds: a record of a version it cannot read. The target is left alone,
// with that reason, and never gets a second cache beside the first, whose
// patches are live.
TEST_F(Daemon, ACacheRecordOfANewerDynidIsLeftAloneAndNeverInjectedTwice) {
  pid_t hot = 0;
  std::string exe;
  ASSERT_NO_FATAL_FAILURE(dynimized_hot("dyni-hot-newer", "25", hot, exe));
  const uint64_t addr = std::stoull(target_json(host, hot)["dynimized"]["cache"]["addr"].get<std::string>(), nullptr, 16);
  auto magic_mappings = [&] {
    auto maps = profiler::read_maps(hot);
    return maps ? find_cache_records(hot, *maps).size() + unreadable_cache_records(hot, *maps).size() : 0;
  };
  const std::size_t before = magic_mappings();
  host.dyni({"-stop"});
  // The record's version field (bytes 8 to 11) as a newer dynid would write it.
  const uint32_t newer = CacheRecord::kVersion + 93;
  int mem = ::open(fmt::format("/proc/{}/mem", hot).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(mem, 0);
  ASSERT_EQ(::pwrite(mem, &newer, 4, static_cast<off_t>(addr + 8)), 4);
  ::close(mem);
  start({"dyni-hot-newer"}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
  const std::string state = failed_state_of(hot, 20s);
  EXPECT_EQ(state.rfind("failed", 0), 0u) << state << host.log();
  EXPECT_NE(state.find(fmt::format("version {}, which this dynid cannot read", newer)), std::string::npos) << state;
  std::this_thread::sleep_for(3s);  // time enough to profile and inject, were it wrong
  EXPECT_EQ(magic_mappings(), before) << "a second cache";
  EXPECT_FALSE(text_equals_file(hot, exe)) << "the first cache's patches stay";
  expect_right_results_to_the_end(hot);
}

// The package's maintainer scripts (packaging/debian/), run as dpkg runs
// them, against this test's dynid (DYNI_CLI and the DYNI_* paths). An
// upgrade: prerm stops dynid, the target stays dynimized, postinst starts the
// new dynid, which adopts the target: still one cache. A removal: prerm
// returns the target to its original code, then stops dynid; with dynid
// stopped and the target dynimized, it refuses, naming the process.
TEST_F(Daemon, ThePackagesScriptsKeepOneCacheAcrossAnUpgradeAndUndoBeforeRemoval) {
  pid_t hot = 0;
  std::string exe;
  ASSERT_NO_FATAL_FAILURE(dynimized_hot("dyni-hot-pkg", "45", hot, exe));
  const std::size_t caches = caches_in(hot);
  ASSERT_EQ(caches, 1u);
  const pid_t old_daemon = host.daemon_pid();
  auto script = [&](const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env", std::string("DYNI_CLI=") + DYNI_TEST_DYNI, "/bin/sh",
                                     std::string(DYNI_SOURCE_DIR) + "/packaging/debian/" + name};
    argv.insert(argv.end(), args.begin(), args.end());
    return host.run(argv);
  };
  RunResult prerm = script("prerm", {"upgrade", "0.1.0"});
  ASSERT_EQ(prerm.exit_code, 0) << prerm.out << prerm.err;
  EXPECT_EQ(host.daemon_pid(), 0) << "prerm upgrade stops dynid";
  EXPECT_TRUE(::access((host.run_dir() + "/restart-after-upgrade").c_str(), F_OK) == 0);
  EXPECT_FALSE(text_equals_file(hot, exe)) << "the target stays dynimized across the upgrade";
  RunResult postinst = script("postinst", {"configure", "0.1.0"});
  ASSERT_EQ(postinst.exit_code, 0) << postinst.out << postinst.err;
  EXPECT_NE(host.daemon_pid(), 0) << "postinst starts the new dynid";
  EXPECT_NE(host.daemon_pid(), old_daemon);
  EXPECT_FALSE(::access((host.run_dir() + "/restart-after-upgrade").c_str(), F_OK) == 0);
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 20s)) << host.state_of(hot) << host.log();
  EXPECT_EQ(target_json(host, hot)["dynimized"]["adopted"], true);
  std::this_thread::sleep_for(2s);  // time enough to inject again, were it wrong
  EXPECT_EQ(caches_in(hot), caches) << "a second cache after the upgrade";
  RunResult listed = host.dyni({"-caches"});
  EXPECT_EQ(listed.exit_code, 1) << listed.out << listed.err;
  EXPECT_NE(listed.out.find(fmt::format("(pid {}): optimized cache at", hot)), std::string::npos) << listed.out;
  // With dynid stopped, nothing can undo: the removal is refused, and says so.
  ASSERT_EQ(host.dyni({"-stop"}).exit_code, 0);
  RunResult refused = script("prerm", {"remove"});
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("dynid is not running"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(fmt::format("(pid {})", hot)), std::string::npos) << refused.err;
  EXPECT_FALSE(text_equals_file(hot, exe)) << "a refused removal changes nothing";
  ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 20s)) << host.state_of(hot) << host.log();
  RunResult remove = script("prerm", {"remove"});
  ASSERT_EQ(remove.exit_code, 0) << remove.out << remove.err;
  EXPECT_NE(remove.out.find("original code restored"), std::string::npos) << remove.out;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "prerm remove undoes every target";
  EXPECT_EQ(host.daemon_pid(), 0) << "and stops dynid";
  EXPECT_EQ(host.dyni({"-caches"}).out.find(fmt::format("(pid {})", hot)), std::string::npos) << "still listed";
  expect_right_results_to_the_end(hot);
}

// Counting in bursts (counting_duty_percent below 100): the entries lead to
// the counting copies and back to the file's bytes in turn, the phase says
// so, and the counts (from the bursts alone) still lay the code out. The
// target checks every result it computes.
TEST_F(Daemon, CountingRunsInBurstsWithTheOriginalCodeBetween) {
  const std::string options = std::string(kFastOptions) +
                              "profile_min_samples = 500\nprofile_max_seconds = 10\n"
                              "counting_min_seconds = 4\ncounting_max_seconds = 8\ncounting_duty_percent = 50\n";
  start({"dyni-hot-bst"}, options);
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-bst");
  pid_t hot = host.spawn({exe, "120", "2"});
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t["pid"] == hot && t.value("counting", nlohmann::json()).is_object())
        return t["counting"].value("phase", "") == "counting";
    return false;
  }, 40s)) << host.state_of(hot) << host.log();
  // Both states seen within the phase's 4 s at least: counting, and paused.
  bool seen_original = false, seen_counting = false;
  for (auto until = std::chrono::steady_clock::now() + 3s;
       std::chrono::steady_clock::now() < until && !(seen_original && seen_counting);
       std::this_thread::sleep_for(20ms))
    (text_equals_file(hot, exe) ? seen_original : seen_counting) = true;
  EXPECT_TRUE(seen_counting) << "the counting copies never patched in";
  EXPECT_TRUE(seen_original) << "no pause between bursts";
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 40s)) << host.state_of(hot) << host.log();
  nlohmann::json counting = target_json(host, hot)["counting"];
  EXPECT_EQ(counting.value("duty_percent", 0), 50) << counting.dump();
  EXPECT_GE(counting.value("pauses", 0), 3) << counting.dump();
  EXPECT_GE(counting.value("seconds", 0.0), 4.0) << counting.dump();
  EXPECT_LT(counting.value("counting_seconds", 99.0), 0.8 * counting.value("seconds", 0.0))
      << "the counting copies ran about half the phase: " << counting.dump();
  EXPECT_GT(counting.value("counting_seconds", 0.0), 1.0) << counting.dump();
  EXPECT_GT(counting.value("entries_resumed", 0), 0) << counting.dump();
  EXPECT_GT(counting.value("longest_resume_ms", 0.0), 0.0) << counting.dump();
  EXPECT_EQ(counting.value("phase", ""), "ended") << counting.dump();
  nlohmann::json d = target_json(host, hot)["dynimized"];
  EXPECT_NE(d.value("layout", "").find("by counts"), std::string::npos) << d.dump();
  EXPECT_FALSE(text_equals_file(hot, exe));
  EXPECT_EQ(caches_in(hot, CacheTier::Counting), 1u);
  kill(hot, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(hot, &status, 0), hot);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
}

// -undo during a pause between bursts (duty 10 %: pauses of 4.5 s): the
// target is undone on its original code, and the counting copies are never
// patched in again by the phase, which ends.
TEST_F(Daemon, UndoDuringACountingPauseEndsThePhaseForGood) {
  const std::string options = std::string(kFastOptions) +
                              "profile_min_samples = 500\nprofile_max_seconds = 10\n"
                              "counting_min_seconds = 30\ncounting_max_seconds = 60\ncounting_duty_percent = 10\n";
  start({"dyni-hot-pau"}, options);
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-pau");
  pid_t hot = host.spawn({exe, "120", "2"});
  ASSERT_TRUE(host.wait_for([&](const nlohmann::json& j) {
    for (const auto& t : j.value("targets", nlohmann::json::array()))
      if (t["pid"] == hot && t.value("counting", nlohmann::json()).is_object())
        return t["counting"].value("paused", false) && t["counting"].value("pauses", 0) >= 1;
    return false;
  }, 60s)) << host.state_of(hot) << host.log();
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_NE(undo.out.find("counting stopped, original code restored"), std::string::npos) << undo.out;
  EXPECT_EQ(host.state_of(hot), "undone");
  for (int i = 0; i < 30; ++i, std::this_thread::sleep_for(100ms))  // past where the pause would have ended
    ASSERT_TRUE(text_equals_file(hot, exe)) << "the counting copies came back after -undo";
  nlohmann::json counting = target_json(host, hot)["counting"];
  EXPECT_EQ(counting.value("phase", ""), "stopped by dyni -undo") << counting.dump();
  EXPECT_GE(counting.value("counter_sites_off", 0) + 8, counting.value("counter_sites", 0)) << counting.dump();
  EXPECT_GT(counting.value("longest_pause_ms", 0.0), 0.0) << counting.dump();
  EXPECT_EQ(caches_in(hot), 0u) << "no optimized cache was made";
  kill(hot, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(hot, &status, 0), hot);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
}

// The counting phase, stopped by the operator: -undo while the target
// counts (it is dynimizing) puts every original byte back and ends the phase
// (counters off); -redo says there is nothing to redo; the target runs on
// with right results. Then -stop while a second target counts ends its
// phase the same way, and a new dynid finds the ended counting cache, leaves
// it ended and counts the target afresh.
TEST_F(Daemon, UndoAndStopDuringCountingPutTheOriginalCodeBack) {
  const std::string options = std::string(kFastOptions) +
                              "profile_min_samples = 500\nprofile_max_seconds = 10\n"
                              "counting_min_seconds = 30\ncounting_max_seconds = 60\n"
                              "counting_duty_percent = 100\n";  // no pauses: the copies stay patched in
  start({"dyni-hot-cnt"}, options);
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-cnt");
  pid_t hot = host.spawn({exe, "120", "2"});
  auto counting_now = [&](pid_t pid) {
    return host.wait_for([&](const nlohmann::json& j) {
      for (const auto& t : j.value("targets", nlohmann::json::array()))
        if (t["pid"] == pid && t.value("counting", nlohmann::json()).is_object())
          return t["counting"].value("phase", "") == "counting" && t["counting"].value("counts_total", 0) > 0;
      return false;
    }, 40s);
  };
  ASSERT_TRUE(counting_now(hot)) << host.state_of(hot) << host.log();
  EXPECT_EQ(host.state_of(hot), "dynimizing");
  EXPECT_FALSE(text_equals_file(hot, exe)) << "counting copies are patched in";
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_NE(undo.out.find("counting stopped, original code restored"), std::string::npos) << undo.out;
  EXPECT_EQ(host.state_of(hot), "undone");
  EXPECT_TRUE(text_equals_file(hot, exe)) << "undo during counting must restore every byte";
  nlohmann::json counting = target_json(host, hot)["counting"];
  EXPECT_EQ(counting.value("phase", ""), "stopped by dyni -undo") << counting.dump();
  EXPECT_GE(counting.value("counter_sites_off", 0) + 8, counting.value("counter_sites", 0)) << counting.dump();
  RunResult redo = host.dyni({"-redo"});
  EXPECT_NE(redo.exit_code, 0) << redo.out;
  EXPECT_NE((redo.out + redo.err).find("nothing to redo"), std::string::npos) << redo.out << redo.err;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "a counting cache never comes back";
  EXPECT_EQ(caches_in(hot), 0u) << "no optimized cache was made";

  pid_t second = host.spawn({exe, "120", "2"});
  ASSERT_TRUE(counting_now(second)) << host.state_of(second) << host.log();
  host.dyni({"-stop"});
  ASSERT_TRUE(DyniHost::alive(second));
  EXPECT_TRUE(text_equals_file(second, exe)) << "-stop during counting must restore every byte";
  EXPECT_EQ(caches_in(second, CacheTier::Counting), 1u);
  // A new dynid ends nothing twice and counts afresh: a second counting cache.
  start({"dyni-hot-cnt"}, std::string(kFastOptions) + "profile_min_samples = 500\nprofile_max_seconds = 10\n");
  ASSERT_TRUE(host.wait_for_state(second, "dynimized", 40s)) << host.state_of(second) << host.log();
  EXPECT_EQ(caches_in(second), 1u);
  EXPECT_EQ(caches_in(second, CacheTier::Counting), 2u) << "the old counting cache stays ended, a new one counted";
  for (pid_t p : {hot, second}) {
    kill(p, SIGTERM);
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
  }
}

// perf's map (dynid/perf_map.h): a target's /tmp/perf-PID.map names its
// copies "<function> [dyni]" at their addresses in dyni's caches; a map left
// by a dead process with the same pid is replaced, whoever owned it, unless
// another user's is held open by a live process; a symlink planted at the
// name is never followed (the file it points to stays as it was), and a FIFO
// there is never opened.
TEST_F(Daemon, PerfMapNamesTheCopiesAndNeverFollowsASymlink) {
  start({"dyni-hot-map"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-map");
  pid_t planted = host.spawn({exe, "60", "0"});
  const std::string planted_map = "/tmp/perf-" + std::to_string(planted) + ".map";
  const std::string victim = host.dir() + "/victim";
  ASSERT_TRUE(write_file_atomic(victim, "victim\n", 0644));
  ::unlink(planted_map.c_str());
  ASSERT_EQ(::symlink(victim.c_str(), planted_map.c_str()), 0) << errno_text();
  pid_t fifo = host.spawn({exe, "60", "0"});
  const std::string fifo_map = "/tmp/perf-" + std::to_string(fifo) + ".map";
  ::unlink(fifo_map.c_str());
  ASSERT_EQ(::mkfifo(fifo_map.c_str(), 0666), 0) << errno_text();
  pid_t stale = host.spawn({exe, "60", "0"});
  const std::string stale_map = "/tmp/perf-" + std::to_string(stale) + ".map";
  ::unlink(stale_map.c_str());
  ASSERT_TRUE(write_file_atomic(stale_map, "1000 10 a dead process's function\n", 0644));
  struct timespec an_hour_ago[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, stale_map.c_str(), an_hour_ago, 0), 0);
  // Another user's, as a postgres backend's map is when a root process gets its pid.
  ASSERT_EQ(::chown(stale_map.c_str(), 65534, 65534), 0) << errno_text();
  // Another user's old map that a live process holds open (one of another
  // pid namespace that shares this /tmp, as containers of one pod may) is
  // kept.
  pid_t held = host.spawn({exe, "60", "0"});
  const std::string held_map = "/tmp/perf-" + std::to_string(held) + ".map";
  ::unlink(held_map.c_str());
  ASSERT_TRUE(write_file_atomic(held_map, "2000 10 a live process's function\n", 0644));
  ASSERT_EQ(::utimensat(AT_FDCWD, held_map.c_str(), an_hour_ago, 0), 0);
  ASSERT_EQ(::chown(held_map.c_str(), 65534, 65534), 0) << errno_text();
  pid_t holder = host.spawn({"/bin/sh", "-c", "exec sleep 60 < " + held_map});
  struct Remove {
    std::vector<std::string> paths;
    ~Remove() { for (const auto& p : paths) ::unlink(p.c_str()); }
  } remove{{planted_map, stale_map, fifo_map, held_map}};
  ASSERT_TRUE(host.wait_for_state(planted, "dynimized", 40s)) << host.state_of(planted) << host.log();
  ASSERT_TRUE(host.wait_for_state(stale, "dynimized", 40s)) << host.state_of(stale) << host.log();
  ASSERT_TRUE(host.wait_for_state(fifo, "dynimized", 40s)) << "a FIFO at the map's name must not hold dynid up: "
                                                           << host.state_of(fifo) << host.log();
  EXPECT_NE(target_json(host, fifo)["dynimized"].value("perf_map_error", "").find("not a regular file"),
            std::string::npos) << target_json(host, fifo).dump();
  // At once: a system-wide perf on this host would block opening that FIFO as the process's map.
  ::unlink(fifo_map.c_str());
  kill(fifo, SIGKILL);

  nlohmann::json d = target_json(host, planted)["dynimized"];
  EXPECT_TRUE(d["perf_map"].is_null()) << d.dump();
  EXPECT_NE(d.value("perf_map_error", ""), "") << d.dump();
  auto victim_now = read_file(victim, 4096);
  ASSERT_TRUE(victim_now);
  EXPECT_EQ(*victim_now, "victim\n") << "dynid wrote through a symlink";

  ASSERT_TRUE(host.wait_for_state(held, "dynimized", 40s)) << host.state_of(held) << host.log();
  d = target_json(host, held)["dynimized"];
  EXPECT_NE(d.value("perf_map_error", "").find("held open by another process"), std::string::npos) << d.dump();
  EXPECT_EQ(read_file(held_map, 4096).value_or(""), "2000 10 a live process's function\n");
  kill(holder, SIGKILL);
  kill(held, SIGKILL);
  waitpid(holder, nullptr, 0);
  waitpid(held, nullptr, 0);

  d = target_json(host, stale)["dynimized"];
  EXPECT_EQ(d["perf_map"], nlohmann::json(stale_map)) << d.dump();
  auto map = read_file(stale_map, 1 << 20);
  ASSERT_TRUE(map) << map.error().message();
  EXPECT_EQ(map->find("a dead process's function"), std::string::npos) << "the dead process's map was kept";
  EXPECT_NE(map->find("hot_work"), std::string::npos) << *map;
  // Every line a copy in one of the target's anonymous executable mappings (dyni's caches).
  auto maps = profiler::read_maps(stale);
  ASSERT_TRUE(maps);
  std::istringstream lines(*map);
  std::string line;
  int copies = 0;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    uint64_t start = 0, size = 0;
    fields >> std::hex >> start >> size;
    EXPECT_TRUE(line.size() > 7 && line.substr(line.size() - 7) == " [dyni]") << line;
    bool in_cache = false;
    for (const auto& m : *maps) in_cache |= m.path.empty() && m.executable && start >= m.start && start + size <= m.end;
    EXPECT_TRUE(in_cache) << line;
    ++copies;
  }
  EXPECT_GE(copies, 15) << *map;
  struct stat st{};
  ASSERT_EQ(::stat(stale_map.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid()) << "owned as the target would own it";
  for (pid_t p : {planted, stale, fifo}) {
    kill(p, SIGTERM);  // the FIFO's one is killed already
    int status = 0;
    waitpid(p, &status, 0);
  }
}

// A function holding a USDT probe site stays in the original code, named
// with its probe in -status -json, and a uprobe attached there (as
// bpftrace's usdt: does) fires while the target runs dynimized; the other
// hot function is copied. With copy_usdt_functions = true it is copied too,
// and the same uprobe then never fires: what the default prevents.
// A uprobe (or a breakpoint a debugger left) puts an int3 into a hot
// function's code in the process: dyni copies from the file, so the function
// stays in the original code, and is said to hold a breakpoint, in the log
// and in -status -json; the probe keeps firing.
TEST_F(Daemon, AHotFunctionHoldingABreakpointIsLeftOutAndSaidSo) {
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-bp");
  auto file = elf::ElfFile::open(exe);
  ASSERT_TRUE(file) << file.error().message();
  auto table = elf::FunctionTable::build(*file, &*file);
  ASSERT_TRUE(table) << table.error().message();
  uint64_t probed = 0;
  for (const auto& f : table->functions())
    if (elf::display_name(f).starts_with("unsigned long hot_work<0>(")) probed = f.addr;
  ASSERT_NE(probed, 0u);
  // One thread does the work: a uprobe bound to a task is taken out of the
  // process's code when another thread hits it (Linux 6.18).
  pid_t pid = host.spawn({exe, "40", "0"});
  std::this_thread::sleep_for(200ms);
  int fd = open_uprobe(pid, exe, probed);
  ASSERT_GE(fd, 0) << errno_text();
  start({"dyni-hot-bp"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  nlohmann::json d = target_json(host, pid)["dynimized"];
  std::size_t held = 0;
  for (const auto& [kind, n] : d["skipped"].items())
    if (kind.find("an int3 the file does not have") != std::string::npos) held += n.get<std::size_t>();
  EXPECT_EQ(held, 1u) << d.dump();
  EXPECT_NE(host.log().find("hold an int3 the file does not have"), std::string::npos) << host.log();
  auto map = read_file("/tmp/perf-" + std::to_string(pid) + ".map", 1 << 20);
  ASSERT_TRUE(map) << map.error().message();
  EXPECT_EQ(map->find("hot_work<0>"), std::string::npos) << "copied despite its breakpoint: " << *map;
  EXPECT_NE(map->find("hot_work<1>"), std::string::npos) << "the others are copied: " << *map;
  const uint64_t before = hits(fd);
  std::this_thread::sleep_for(500ms);
  EXPECT_GT(hits(fd), before) << "the probe must keep firing";
  close(fd);
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  ::unlink(("/tmp/perf-" + std::to_string(pid) + ".map").c_str());
}

TEST_F(Daemon, AFunctionWithAUsdtProbeStaysWhereItsProbeFires) {
  std::string exe = host.install_program(DYNI_TEST_USDT, "dyni-usdt");
  auto file = elf::ElfFile::open(exe);
  ASSERT_TRUE(file) << file.error().message();
  auto probes = elf::usdt_probes(*file);
  ASSERT_TRUE(probes) << probes.error().message();
  ASSERT_EQ(probes->size(), 1u);
  EXPECT_EQ((*probes)[0].provider, "dyni_test");
  EXPECT_EQ((*probes)[0].name, "round_done");
  for (bool copy : {false, true}) {
    SCOPED_TRACE(copy ? "copy_usdt_functions = true" : "the default");
    start({"dyni-usdt"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n" +
                             (copy ? "copy_usdt_functions = true\n" : ""));
    pid_t pid = host.spawn({exe, "60"});
    ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
    nlohmann::json d = target_json(host, pid)["dynimized"];
    bool probed_kept_out = false;
    for (const auto& k : d["kept_out"])
      probed_kept_out |= k.value("function", "").find("probed_work") != std::string::npos &&
                         k.value("reason", "").find("dyni_test:round_done") != std::string::npos;
    EXPECT_EQ(probed_kept_out, !copy) << d.dump();
    auto map = read_file("/tmp/perf-" + std::to_string(pid) + ".map", 1 << 20);
    ASSERT_TRUE(map) << map.error().message();
    EXPECT_NE(map->find("plain_work"), std::string::npos) << *map;  // the map names copies only
    EXPECT_EQ(map->find("probed_work") != std::string::npos, copy) << *map;
    int fd = open_uprobe(pid, exe, (*probes)[0].pc);
    ASSERT_GE(fd, 0) << errno_text();
    std::this_thread::sleep_for(1s);
    const uint64_t fired = hits(fd);
    close(fd);
    if (copy) EXPECT_EQ(fired, 0u) << "the copy ran the probe's nop, not the original's";
    else EXPECT_GT(fired, 1000u) << "the probe must fire for every round";
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    ::unlink(("/tmp/perf-" + std::to_string(pid) + ".map").c_str());
    ASSERT_EQ(host.dyni({"-stop"}).exit_code, 0);
  }
}

// A dynimized target that crashes for its own reasons: glibc's backtrace()
// walks through the copies to libc's start (their frames are registered),
// and dyni -addr2orig maps the cache addresses it printed back to the
// original function, after the process is gone.
TEST_F(Daemon, CrashStacksMapBackToTheOriginalFunctions) {
  start({"dyni-crash"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_CRASH, "dyni-crash");
  const std::string out = host.dir() + "/backtrace.txt";
  pid_t pid = host.spawn({exe, "60", out});
  RemovesPerfMap remove_map{pid};
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  ASSERT_EQ(target_json(host, pid)["dynimized"].value("frames_registered", "").rfind("yes", 0), 0u)
      << target_json(host, pid).dump();
  kill(pid, SIGUSR1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << "the handler's exit; status " << status;
  auto trace = read_file(out, 1 << 16);
  ASSERT_TRUE(trace) << trace.error().message();
  EXPECT_NE(trace->find("__libc_start"), std::string::npos) << "the walk went through the copies: " << *trace;
  std::vector<std::string> args = {"-addr2orig=" + std::to_string(pid)};
  for (std::size_t at = 0; (at = trace->find("[0x", at)) != std::string::npos; at += 3)
    args.push_back(trace->substr(at + 1, trace->find(']', at) - at - 1));
  ASSERT_GE(args.size(), 4u) << *trace;
  args.push_back("0x1");  // in no copy
  RunResult r = host.dyni(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("has exited"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("crashing_work"), std::string::npos) << "the faulting copy, named: " << r.out << *trace;
  EXPECT_NE(r.out.find("calling_work"), std::string::npos) << "its caller's copy, named: " << r.out << *trace;
  EXPECT_NE(r.out.find("in dyni's optimized copy at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0x1: in no copy of dyni's"), std::string::npos) << r.out;
  RunResult unknown = host.dyni({"-addr2orig=4194304", "0x1000"});  // PID_MAX_LIMIT: never a process
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("no copies of dyni's were recorded"), std::string::npos) << unknown.err;
}

// What Prometheus's own text parser (Debian's python3-prometheus-client)
// reads in `text`: one "name labels value" line per sample, labels sorted;
// "" when it refuses the text.
std::string prometheus_samples(const DyniHost& host, const std::string& text) {
  const std::string path = host.dir() + "/metrics.txt";
  if (!write_file_atomic(path, text, 0644)) return "";
  RunResult r = host.run({"/usr/bin/python3", "-c",
                          "import sys\n"
                          "from prometheus_client.parser import text_string_to_metric_families as parse\n"
                          "for f in parse(open(sys.argv[1]).read()):\n"
                          "  for s in f.samples:\n"
                          "    print(s.name, ','.join(k + '=' + v for k, v in sorted(s.labels.items())), s.value)\n",
                          path});
  return r.exit_code == 0 ? r.out : "";
}

// dyni -metrics and the node_exporter textfile dynid writes parse with
// Prometheus's own parser and hold the target's facts; with no dynid,
// -metrics says dyni_daemon_up 0 (exit 3). -status colours states only at
// a terminal.
TEST_F(Daemon, MetricsParseWithPrometheusOwnParser) {
  if (host.run({"/usr/bin/python3", "-c", "import prometheus_client"}).exit_code != 0)
    GTEST_SKIP() << "needs Debian's python3-prometheus-client (apt-get install python3-prometheus-client)";
  const std::string node = host.dir() + "/node-exporter";
  ASSERT_EQ(::mkdir(node.c_str(), 0755), 0) << errno_text();
  start({"dyni-hot-metrics"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n" +
                                  "metrics_textfile = " + node + "/dyni.prom\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-metrics");
  pid_t pid = host.spawn({exe, "60", "0"});
  RemovesPerfMap remove_map{pid};
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  RunResult m = host.dyni({"-metrics"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const std::string samples = prometheus_samples(host, m.out);
  ASSERT_NE(samples, "") << "Prometheus's parser refused:\n" << m.out;
  const std::string labels = "name=dyni-hot-metrics,pid=" + std::to_string(pid);
  EXPECT_NE(samples.find("dyni_daemon_up  1.0"), std::string::npos) << samples;
  EXPECT_NE(samples.find("dyni_target_state " + labels + ",state=dynimized 1.0"), std::string::npos) << samples;
  EXPECT_NE(samples.find("dyni_license_active  1.0"), std::string::npos) << samples;
  for (const char* name : {"dyni_daemon_cpu_seconds_total  ", "dyni_daemon_resident_bytes  ", "dyni_license_days_left  "})
    EXPECT_NE(samples.find(name), std::string::npos) << name << samples;
  std::istringstream lines(samples);
  double functions = 0, cache = 0, seconds = 0;
  for (std::string line; std::getline(lines, line);) {  // "name labels value", labels maybe empty
    const std::size_t a = line.find(' '), b = line.rfind(' ');
    if (a == std::string::npos || line.substr(a + 1, b - a - 1) != labels) continue;
    const std::string name = line.substr(0, a), v = line.substr(b + 1);
    if (name == "dyni_target_functions_optimized") functions = std::stod(v);
    if (name == "dyni_target_cache_bytes") cache = std::stod(v);
    if (name == "dyni_target_seconds_to_dynimized") seconds = std::stod(v);
  }
  EXPECT_GE(functions, 15) << samples;
  EXPECT_GE(cache, 4096) << samples;
  EXPECT_GT(seconds, 0) << samples;
  // The textfile: rewritten every 15 s, so it says dynimized within 20.
  std::string file;
  for (int i = 0; i < 40 && file.find("state=\"dynimized\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(500ms);
    file = read_file(node + "/dyni.prom", 1 << 20).value_or("");
  }
  EXPECT_NE(file.find("state=\"dynimized\""), std::string::npos) << file;
  EXPECT_NE(prometheus_samples(host, file), "") << file;
  // -status colours a state only for a terminal (script(1) gives dyni a pty).
  auto at_terminal = [&](const char* no_color) {
    return host.run({"/usr/bin/env", "-u", "NO_COLOR", "TERM=xterm", no_color, "/usr/bin/script", "-qec",
                     std::string(DYNI_TEST_DYNI) + " -status", "/dev/null"}).out;
  };
  EXPECT_NE(at_terminal("COLOR=any").find("\033[32m"), std::string::npos) << at_terminal("COLOR=any");
  EXPECT_EQ(at_terminal("NO_COLOR=1").find("\033["), std::string::npos) << "NO_COLOR set";
  EXPECT_EQ(host.dyni({"-status"}).out.find("\033["), std::string::npos) << "into a pipe";
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(host.dyni({"-stop"}).exit_code, 0);
  RunResult down = host.dyni({"-metrics"});
  EXPECT_EQ(down.exit_code, 3);
  EXPECT_NE(prometheus_samples(host, down.out).find("dyni_daemon_up  0.0"), std::string::npos) << down.out;
}

// Shares of `pid`'s samples per function from `perf record -p` for
// `seconds` (cpu-clock, user code), as perf names them; a copy's
// "NAME [dyni]" from dynid's perf map counts as NAME. Empty if perf failed.
std::map<std::string, double> perf_shares(const DyniHost& host, pid_t pid, int seconds, double* dyni_share) {
  const std::string data = host.dir() + "/perf.data", script = host.dir() + "/perf.txt";
  std::map<std::string, double> shares;
  if (system(fmt::format("perf record -q -e cpu-clock:u -F 1999 -p {} -o {} -- sleep {} >/dev/null 2>&1", pid, data,
                         seconds).c_str()) != 0 ||
      system(fmt::format("perf script -i {} -F ip,sym > {} 2>/dev/null", data, script).c_str()) != 0)
    return shares;
  std::ifstream in(script);
  double total = 0, dyni = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string ip, name;
    if (!(fields >> ip)) continue;
    ++total;
    std::getline(fields >> std::ws, name);
    if (name.ends_with(" [dyni]")) name.resize(name.size() - 7), ++dyni;
    shares[perf_style_name(name)] += 1;
  }
  for (auto& [name, n] : shares) n = 100 * n / std::max(total, 1.0);
  if (dyni_share) *dyni_share = 100 * dyni / std::max(total, 1.0);
  return shares;
}

// perf record and perf report on a dynimized target name its copies through
// dynid's perf map: the top 5 functions of the original run, with [dyni]
// names merged into their originals, have the same shares within 3
// percentage points (dyni-test-hot's top five hold 8.0 % down to 6.7 %,
// about 450 samples each in 3 s at 1999 Hz: sampling alone varies by about
// 0.4 points), and hardly any sample is left without a name.
TEST_F(Daemon, PerfReportNamesTheCopiesAsTheirOriginals) {
  if (system("perf --version >/dev/null 2>&1") != 0) GTEST_FAIL() << "perf is not installed (apt-get install linux-perf)";
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-perf");
  pid_t pid = host.spawn({exe, "90", "0"});
  RemovesPerfMap remove_map{pid};
  std::this_thread::sleep_for(500ms);
  const std::map<std::string, double> before = perf_shares(host, pid, 3, nullptr);
  ASSERT_FALSE(before.empty()) << "perf record or perf script failed";
  std::vector<std::pair<double, std::string>> top;
  for (const auto& [name, share] : before) top.emplace_back(share, name);
  std::sort(top.rbegin(), top.rend());
  ASSERT_GE(top.size(), 5u);
  start({"dyni-hot-perf"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  double dyni_share = 0;
  std::map<std::string, double> after = perf_shares(host, pid, 3, &dyni_share);
  ASSERT_FALSE(after.empty()) << "perf record or perf script failed";
  EXPECT_GT(dyni_share, 80) << "samples in dyni's copies, named from the perf map";
  EXPECT_LT(after["[unknown]"], 2) << "samples perf could not name";
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& [share, name] = top[i];
    EXPECT_TRUE(name.starts_with("hot_work<")) << name;
    EXPECT_NEAR(after[name], share, 3.0) << name;
    std::printf("%-14s %5.2f %% of samples before, %5.2f %% dynimized\n", name.c_str(), share, after[name]);
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// gdb -p PID, given the command -status -json shows, names the copy the
// thread is in and unwinds through it to main (dynid's symbol file of the
// cache: a symbol per copy and the cache's .eh_frame); the target lives on.
TEST_F(Daemon, GdbNamesTheCopiesAndUnwindsThroughThem) {
  if (system("gdb --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs gdb (apt-get install gdb)";
  start({"dyni-hot-gdb"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-gdb");
  pid_t pid = host.spawn({exe, "60", "0"});
  RemovesPerfMap remove_map{pid};
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  const std::string command = target_json(host, pid)["dynimized"].value("gdb_command", "");
  ASSERT_EQ(command.rfind("add-symbol-file ", 0), 0u) << target_json(host, pid).dump();
  // The PC may be outside the copies, or in hot_short_entry's copy (2.6 %
  // of the time), which is written in assembly and has no source line:
  // gdb is asked again until the thread is in a copy of hot_work<...>.
  auto in_hot_work_copy = [](const std::string& out) {
    const std::size_t frame = out.find("hot_work<");
    return frame != std::string::npos && out.find("[dyni]", frame) < out.find('\n', frame);
  };
  RunResult bt;
  for (int attempt = 0; attempt < 10 && !in_hot_work_copy(bt.out); ++attempt)
    bt = host.run({"/usr/bin/gdb", "-nx", "-batch", "-p", std::to_string(pid), "-ex", command, "-ex", "bt"});
  std::printf("%s", bt.out.c_str());
  EXPECT_TRUE(in_hot_work_copy(bt.out)) << "a frame in a copy of hot_work<...>:\n" << bt.out << bt.err;
  EXPECT_NE(bt.out.find(" main ("), std::string::npos) << "unwound through the copy to main:\n" << bt.out << bt.err;
  // dyni-test-hot has debug info (-g): the copy's frame has the original's line.
  const std::size_t copy_frame = bt.out.find("hot_work<");
  const std::string frame_line =
      copy_frame == std::string::npos ? "" : bt.out.substr(copy_frame, bt.out.find('\n', copy_frame) - copy_frame);
  EXPECT_NE(frame_line.find("hot_functions.cpp:"), std::string::npos) << "no source line in the copy's frame:\n" << bt.out;
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(DyniHost::alive(pid)) << "gdb detached, the target runs on";
  // While gdb holds the target, dynid cannot stop it: -undo, and -redo
  // after it, say who holds it, and work once gdb is gone.
  auto tracer = [&] { return status_field(read_file("/proc/" + std::to_string(pid) + "/status", 1 << 16).value_or(""), "TracerPid:"); };
  for (const char* command : {"-undo", "-redo"}) {
    pid_t gdb = host.spawn({"/usr/bin/gdb", "-nx", "-batch", "-p", std::to_string(pid), "-ex", "shell sleep 5"});
    for (int i = 0; i < 100 && tracer().find(std::to_string(gdb)) == std::string::npos; ++i) std::this_thread::sleep_for(100ms);
    ASSERT_NE(tracer().find(std::to_string(gdb)), std::string::npos) << "gdb did not attach within 10 s";
    RunResult held = host.dyni({command});
    std::printf("%s: %s%s", command, held.out.c_str(), held.err.c_str());
    EXPECT_EQ(held.exit_code, 1) << command << ": " << held.out << held.err;
    EXPECT_NE((held.out + held.err).find("traced by pid " + std::to_string(gdb) + " (gdb)"), std::string::npos)
        << command << ": " << held.out << held.err;
    int gdb_status = 0;
    waitpid(gdb, &gdb_status, 0);
    RunResult after = host.dyni({command});
    EXPECT_EQ(after.exit_code, 0) << "gdb gone: " << command << ": " << after.out << after.err;
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// A map dynid wrote stays after its process exits (perf reads it at report
// time), until a new process takes the pid: then it is removed, so that it
// never names the new process's code. The pid is taken through
// ns_last_pid, as a busy host would reuse it.
TEST_F(Daemon, ADeadTargetsPerfMapGoesWhenANewProcessTakesItsPid) {
  if (::access("/proc/sys/kernel/ns_last_pid", W_OK) != 0) GTEST_SKIP() << "ns_last_pid is not writable here";
  start({"dyni-hot-dead"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-dead");
  pid_t dead = host.spawn({exe, "60", "1"});
  const std::string map = fmt::format("/tmp/perf-{}.map", dead);
  RemovesPerfMap removes{dead};
  ASSERT_TRUE(host.wait_for_state(dead, "dynimized", 40s)) << host.state_of(dead) << host.log();
  ASSERT_EQ(::access(map.c_str(), F_OK), 0) << "dynid wrote no map";
  kill(dead, SIGKILL);
  waitpid(dead, nullptr, 0);
  // Scans go on: the pid is free, the map stays for perf report. (Long
  // enough that the map is seen older than the next process: start times
  // are known to a second or two.)
  std::this_thread::sleep_for(4s);
  EXPECT_EQ(::access(map.c_str(), F_OK), 0) << "the map went before the pid was taken";
  pid_t taker = -1;
  for (int attempt = 0; attempt < 50 && taker != dead; ++attempt) {
    if (taker > 0) kill(taker, SIGKILL), waitpid(taker, nullptr, 0);
    std::ofstream("/proc/sys/kernel/ns_last_pid") << dead - 1;
    taker = host.spawn({"/bin/sleep", "30"});
  }
  ASSERT_EQ(taker, dead) << "could not take the pid back";
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i, std::this_thread::sleep_for(100ms)) gone = ::access(map.c_str(), F_OK) != 0;
  EXPECT_TRUE(gone) << "the dead process's map still names pid " << dead << "'s code\n" << host.log();
  kill(taker, SIGKILL);
  waitpid(taker, nullptr, 0);
}

// A target whose own JIT keeps its perf map (it holds /tmp/perf-PID.map
// open, as the JVM's agent or node does) keeps it as it is: dyni's lines
// could be cut into the JIT's at its own offset. -status says why dyni
// wrote none.
TEST_F(Daemon, PerfMapOfATargetsOwnJitIsLeftAsItIs) {
  start({"dyni-hot-jit"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-jit");
  ::setenv("DYNI_HOT_PERF_MAP", "1", 1);
  pid_t pid = host.spawn({exe, "60", "1"});
  ::unsetenv("DYNI_HOT_PERF_MAP");
  RemovesPerfMap removes{pid};
  const std::string map = fmt::format("/tmp/perf-{}.map", pid);
  for (int i = 0; i < 50 && ::access(map.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  nlohmann::json d = target_json(host, pid)["dynimized"];
  EXPECT_TRUE(d["perf_map"].is_null()) << d.dump();
  EXPECT_NE(d.value("perf_map_error", "").find("the target's own JIT keeps this map"), std::string::npos) << d.dump();
  auto text = read_file(map, 1 << 20);
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_EQ(*text, "1000 10 jit_code\n") << "the JIT's map was written to";
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

// perf's map goes where perf looks for the process: a target in a mount
// namespace of its own, with a /tmp of its own (as PrivateTmp= gives a
// unit), gets it in that /tmp, and the host's /tmp stays without one.
TEST_F(Daemon, PerfMapGoesToTheTargetsOwnTmp) {
  if (system("unshare --mount true 2>/dev/null") != 0)
    GTEST_SKIP() << "cannot create mount namespaces here (unshare --mount failed)";
  start({"dyni-hot-ns"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-ns");
  // The program lies under the host's /tmp: it is reached through /mnt/d
  // once a fresh tmpfs hides that /tmp.
  pid_t hot = host.spawn({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                          "mount -t tmpfs tmpfs /mnt && mkdir /mnt/d && mount --bind " + host.dir() +
                              " /mnt/d && mount -t tmpfs tmpfs /tmp && exec /mnt/d/dyni-hot-ns 60 0"});
  const std::string map = "/tmp/perf-" + std::to_string(hot) + ".map";
  ::unlink(map.c_str());
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 40s)) << host.state_of(hot) << host.log();
  nlohmann::json d = target_json(host, hot)["dynimized"];
  EXPECT_EQ(d.value("perf_map", ""), map) << d.dump();
  auto inside = read_file("/proc/" + std::to_string(hot) + "/root" + map, 1 << 20);
  ASSERT_TRUE(inside) << inside.error().message();
  EXPECT_NE(inside->find(" [dyni]\n"), std::string::npos) << *inside;
  struct stat st{};
  EXPECT_NE(::stat(map.c_str(), &st), 0) << "the map went to the host's /tmp";
  kill(hot, SIGTERM);
  int status = 0;
  waitpid(hot, &status, 0);
}

// A CPU-bound program with one thread that never makes a system call: the
// cache's frames are registered through that thread, stopped in its own
// code; its results stay right.
TEST_F(Daemon, AProgramWhoseOnlyThreadIsBusyIsDynimized) {
  start({"dyni-hot-one"}, std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-one");
  pid_t hot = host.spawn({exe, "12", "0"});
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 30s)) << host.state_of(hot) << host.log();
  nlohmann::json d = target_json(host, hot)["dynimized"];
  EXPECT_EQ(d["frames_registered"].get<std::string>().rfind("yes", 0), 0u) << d.dump();
  EXPECT_FALSE(text_equals_file(hot, exe));
  expect_right_results_to_the_end(hot);
}

// A server keeps running its old executable after a package upgrade removed
// the file: it is read through /proc/PID/exe, and its threads' stacks are
// unwound through the tables in its memory (no file to open).
TEST_F(Daemon, ATargetWhoseExecutableWasDeletedIsDynimized) {
  start({"dyni-hot-upgraded"}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-upgraded");
  pid_t hot = host.spawn({exe, "7", "2"});
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(::unlink(exe.c_str()), 0);
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 30s)) << host.state_of(hot) << host.log();
  nlohmann::json d = target_json(host, hot)["dynimized"];
  EXPECT_GE(d.value("functions_patched", 0), 10) << d.dump();
  EXPECT_EQ(caches_in(hot), 1u);
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  expect_right_results_to_the_end(hot);
}

// A target under the seccomp filters of Debian's redis-server.service
// (rebuilt by hand: no systemd runs here). dynid runs the filters on every
// call it injects; they allow them all (the cache is mapped r-x directly,
// never writable and executable), so the target is dynimized and computes
// the same, its filters still in place.
TEST_F(Daemon, ATargetUnderDebiansRedisUnitFiltersIsDynimized) {
  std::vector<std::string> argv = under_redis_unit_filters(host.dir());
  if (argv.empty()) GTEST_SKIP() << "systemd-analyze is missing (apt-get install systemd)";
  start({"dyni-hot-filtered"}, std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-filtered");
  argv.insert(argv.end(), {exe, "20", "2"});
  pid_t hot = host.spawn(argv);
  ASSERT_TRUE(host.wait_for_state(hot, "dynimized", 40s)) << host.state_of(hot) << host.log();
  auto status_text = read_file(fmt::format("/proc/{}/status", hot));
  ASSERT_TRUE(status_text);
  EXPECT_NE(status_text->find("Seccomp:\t2"), std::string::npos) << "the target runs under its filters";
  EXPECT_NE(status_text->find("Seccomp_filters:\t2"), std::string::npos) << *status_text;
  EXPECT_GE(target_json(host, hot)["dynimized"].value("functions_patched", 0), 10);
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  expect_right_results_to_the_end(hot);
}

// A filter that would fail one of dyni's calls (madvise, with EPERM, which
// a cache on a huge page makes: small_cache_kib = 0 puts even this small
// one there): the target is left alone, with the call and the filter's
// answer named, before anything was mapped or written; it runs on untouched.
TEST_F(Daemon, ATargetWhoseFilterRefusesACallOfDynisIsLeftAloneWithTheCallNamed) {
  start({"dyni-hot-nomadv"},
        std::string(kFastOptions) + "profile_min_samples = 300\nprofile_max_seconds = 10\nsmall_cache_kib = 0\n");
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-nomadv");
  pid_t hot = host.spawn({DYNI_TEST_SECCOMP_EXEC, "--deny", "madvise", exe, "20", "2"});
  const std::string state = failed_state_of(hot, 30s);
  EXPECT_EQ(state.rfind("failed", 0), 0u) << state << host.log();
  EXPECT_NE(state.find("answers madvise("), std::string::npos) << state;
  EXPECT_NE(state.find("with ERRNO 1 (Operation not permitted)"), std::string::npos) << state;
  EXPECT_TRUE(text_equals_file(hot, exe)) << "a refused target must be untouched";
  EXPECT_EQ(caches_in(hot), 0u);
  EXPECT_TRUE(DyniHost::alive(hot));
}

TEST_F(Daemon, ATargetExitingWhileProfiledIsDropped) {
  start({"dyni-hot-brief"});
  pid_t hot = host.spawn({host.install_program(DYNI_TEST_HOT, "dyni-hot-brief"), "3", "2"});
  ASSERT_TRUE(host.wait_for_state(hot, "profiling", 10s)) << host.state_of(hot);
  ASSERT_TRUE(host.wait_for_state(hot, "", 10s)) << "exited target still listed";
  EXPECT_EQ(host.dyni({"-status"}).exit_code, 0) << "dynid must survive its target's exit";
}

TEST_F(Daemon, UndoAndRedoWithNothingOptimizedSaySo) {
  start({"dyni-x"});
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0);
  EXPECT_EQ(undo.out, "nothing to undo: no target is dynimized\n");
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0);
  EXPECT_EQ(redo.out, "nothing to redo: no target has been undone\n");
  host.dyni({"-stop"});
  EXPECT_EQ(host.dyni({"-undo"}).out, "dyni is not running\n");
}

TEST_F(Daemon, StaleLockAndSocketAfterSigkillAreRecovered) {
  start({"dyni-survivor"});
  pid_t target = host.spawn({host.install_program(DYNI_TEST_IDLE, "dyni-survivor"), "30"});
  ASSERT_TRUE(host.wait_for_state(target, "waiting"));
  pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  kill(daemon, SIGKILL);
  for (int i = 0; i < 100 && DyniHost::alive(daemon); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(std::filesystem::exists(host.socket_path())) << "expected a stale socket";
  EXPECT_EQ(host.dyni({"-status"}).out, "dyni is not running\n");
  EXPECT_TRUE(DyniHost::alive(target)) << "target must survive dynid's death";
  RunResult r = host.dyni({"-start"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "dyni started\n");
  ASSERT_TRUE(host.wait_for_state(target, "waiting"));
  EXPECT_NE(host.log().find("DYNID-WARN removing stale control socket"), std::string::npos);
}

TEST_F(Daemon, OnlyOneDynidPerHost) {
  start({"dyni-x"});
  pid_t first = host.daemon_pid();
  RunResult direct = host.run({DYNI_TEST_DYNID});
  EXPECT_EQ(direct.exit_code, 4) << "its own code: the unit's RestartPreventExitStatus=4";
  EXPECT_EQ(direct.err, "dynid: dynid is already running (pid " + std::to_string(first) + ")\n");
  EXPECT_EQ(host.daemon_pid(), first);
  EXPECT_EQ(host.dyni({"-status"}).exit_code, 0);
}

TEST_F(Daemon, NonRootCallerIsRefused) {
  start({"dyni-x"});
  for (auto args : std::vector<std::vector<std::string>>{
           {"-status"}, {"-start"}, {"-stop"}, {"-undo"}, {"-license=status"}}) {
    RunResult r = host.dyni(args, 65534);  // nobody
    EXPECT_NE(r.exit_code, 0) << args[0];
    EXPECT_EQ(r.err, "dyni must be run as root\n") << args[0];
    EXPECT_EQ(r.out, "") << args[0];
  }
  EXPECT_EQ(host.dyni({"-status"}).exit_code, 0) << "daemon must still be running";
  RunResult version = host.dyni({"-version"}, 65534);
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(version.out.starts_with("dyni ")) << version.out;
}

TEST_F(Daemon, BadFlagsPrintUsageAndExit2) {
  for (auto args : std::vector<std::vector<std::string>>{{}, {"-bogus"}, {"-start", "-stop"}, {"status"}}) {
    RunResult r = host.dyni(args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("usage: dyni"), std::string::npos);
    EXPECT_EQ(r.out, "");
  }
  RunResult help = host.dyni({"-help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("-license=start -token=TOKEN"), std::string::npos);
}

// The bytes at `vaddr` of an ELF file (from its PT_LOAD segment).
std::vector<uint8_t> file_bytes(const std::string& path, uint64_t vaddr, std::size_t n) {
  auto file = elf::ElfFile::open(path);
  std::vector<uint8_t> out(n);
  for (const elf::Segment& seg : file->segments())
    if (seg.type == PT_LOAD && vaddr >= seg.vaddr && vaddr + n <= seg.vaddr + seg.filesz) {
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(vaddr - seg.vaddr + seg.offset)), static_cast<ssize_t>(n));
      ::close(fd);
    }
  return out;
}

std::vector<uint8_t> live_bytes(pid_t pid, uint64_t addr, std::size_t n) {
  std::vector<uint8_t> out(n);
  int fd = ::open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(addr)), static_cast<ssize_t>(n));
  ::close(fd);
  return out;
}

// The link-time addresses where the file's instructions of `f` begin, up
// to `limit` bytes in (where a uprobe or a breakpoint can sit).
std::vector<uint64_t> instruction_starts(const std::string& exe, const elf::Function& f, std::size_t limit) {
  auto decoded = jit::decode_function(file_bytes(exe, f.addr, f.size), f.addr);
  std::vector<uint64_t> out;
  if (!decoded) return out;
  for (const jit::Instruction& in : *decoded)
    if (in.addr < f.addr + limit) out.push_back(in.addr);
  return out;
}

// With probe_safe_entries = false, an entry with no uprobe-safe spot takes
// the jmp at its second instruction (jit/patch_plan.h). A uprobe attached
// after injection there (uprobe:FUNC+N) writes an int3 over the jmp, and
// the kernel then runs the FILE's instruction there out of line and
// resumes after it, inside the jump (the process would die of SIGILL on the
// probe's first hit: README, "Troubleshooting"). -undo puts the file's
// bytes back under the int3 and says so: the probe then fires on the
// original code with results right, and once it is removed the entry is
// the file's again.
TEST_F(Daemon, UndoPutsTheFilesBytesUnderAUprobeAttachedAfterInjection) {
  std::string exe = host.install_program(DYNI_TEST_HOT, "dyni-hot-upr");
  auto file = elf::ElfFile::open(exe);
  ASSERT_TRUE(file) << file.error().message();
  auto table = elf::FunctionTable::build(*file, &*file);
  ASSERT_TRUE(table) << table.error().message();
  const std::string pause = host.dir() + "/pause";
  ::setenv("DYNI_HOT_PAUSE", pause.c_str(), 1);
  pid_t pid = host.spawn({exe, "60", "0"});  // main works, in the original run() it entered before injection
  ::unsetenv("DYNI_HOT_PAUSE");
  RemovesPerfMap removes{pid};
  start({"dyni-hot-upr"},
        std::string(kFastOptions) + "profile_min_samples = 600\nprofile_max_seconds = 20\nprobe_safe_entries = false\n");
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  ASSERT_TRUE(write_file_atomic(pause, "", 0644));
  std::this_thread::sleep_for(300ms);  // the worker waits between rounds, outside the hot code
  auto maps = profiler::read_maps(pid);
  ASSERT_TRUE(maps);
  uint64_t base = 0;
  for (const auto& m : *maps)
    if (m.path == exe && m.offset == 0) base = m.start;
  // The first byte of dyni's jmp where an instruction of the file begins:
  // after hot_short_entry's kept first instruction, where uprobe:FUNC+N would put its int3.
  uint64_t probed = 0;
  for (const auto& f : table->functions()) {
    if (elf::display_name(f) != "hot_short_entry") continue;
    const std::vector<uint8_t> file = file_bytes(exe, f.addr, 16), live = live_bytes(pid, base + f.addr, 16);
    for (uint64_t at : instruction_starts(exe, f, 16))
      if (!probed && live[at - f.addr] != file[at - f.addr] && live[at - f.addr] == 0xe9) probed = at;
    if (probed) break;
  }
  ASSERT_NE(probed, 0u) << "hot_short_entry does not hold dyni's jump at an instruction: "
                        << target_json(host, pid).dump();
  nlohmann::json unsafe = target_json(host, pid)["dynimized"]["entries_unsafe_for_uprobes"];
  EXPECT_GT(unsafe.value("count", 0u), 0u) << unsafe.dump() << ": -status -json names them";
  const std::vector<uint8_t> original = file_bytes(exe, probed, 5);
  int fd = open_uprobe(pid, exe, probed);
  ASSERT_GE(fd, 0) << errno_text();
  EXPECT_EQ(live_bytes(pid, base + probed, 1)[0], 0xcc) << "the uprobe's int3";
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  EXPECT_NE(undo.out.find("1 of them held a uprobe's int3 or byte over dyni's jump"), std::string::npos) << undo.out;
  std::vector<uint8_t> under = original;
  under[0] = 0xcc;
  EXPECT_EQ(live_bytes(pid, base + probed, 5), under);
  ::unlink(pause.c_str());
  std::this_thread::sleep_for(1s);
  EXPECT_GT(hits(fd), 0u) << "the probe fires on the original code";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the target died: status " << status;
  close(fd);
  EXPECT_EQ(live_bytes(pid, base + probed, 5), original) << "the entry is the file's once the probe is gone";
  // Redone, a probe attached and removed while the worker waits: its
  // removal wrote the file's byte over dyni's jmp (half a jmp, which the
  // next call would run); -undo mends it, and says so.
  ASSERT_TRUE(write_file_atomic(pause, "", 0644));
  std::this_thread::sleep_for(300ms);
  RunResult redo = host.dyni({"-redo"});
  ASSERT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  ASSERT_EQ(live_bytes(pid, base + probed, 1)[0], 0xe9) << "the entry is patched again";
  fd = open_uprobe(pid, exe, probed);
  ASSERT_GE(fd, 0) << errno_text();
  close(fd);
  std::vector<uint8_t> half = live_bytes(pid, base + probed, 5);
  EXPECT_EQ(half[0], original[0]) << "the kernel wrote the file's byte back";
  RunResult mend = host.dyni({"-undo"});
  EXPECT_NE(mend.out.find("1 of them held a uprobe's int3 or byte over dyni's jump"), std::string::npos) << mend.out;
  EXPECT_EQ(live_bytes(pid, base + probed, 5), original);
  ::unlink(pause.c_str());
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the target died: status " << status;
  kill(pid, SIGTERM);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
}

// The bytes of `exe`'s code (its executable PT_LOAD) that differ in `pid`
// from the file, by link-time address, outside every function of `table`
// (pads, jit/entry_pads.h) and inside one.
struct CodeChanges {
  std::size_t outside = 0, inside = 0;
};
CodeChanges code_changes(pid_t pid, const std::string& exe, uint64_t base, const elf::FunctionTable& table) {
  CodeChanges out;
  auto file = elf::ElfFile::open(exe);
  for (const elf::Segment& seg : file->segments()) {
    if (seg.type != PT_LOAD || !(seg.flags & PF_X)) continue;
    const std::vector<uint8_t> original = file_bytes(exe, seg.vaddr, seg.filesz), live = live_bytes(pid, base + seg.vaddr, seg.filesz);
    for (std::size_t k = 0; k < original.size(); ++k) {
      if (live[k] == original[k]) continue;
      const elf::Function* f = table.find(seg.vaddr + k);
      ++(f && seg.vaddr + k < f->addr + f->size ? out.inside : out.outside);
    }
  }
  return out;
}

// Uprobes (bpftrace's uprobe:FUNC and uprobe:FUNC+N, perf probe) sit where
// the file's instructions begin; the kernel runs the file's instruction out
// of line and resumes after it, and writes the file's byte back when the
// probe goes. With probe_safe_entries = true an entry patch changes no byte
// where an instruction begins (jit/patch_plan.h): the jmp goes into a jmp
// rel32 or after the REX prefix of a long instruction, or a short jump
// after the REX prefix of a shorter one goes to a pad between functions,
// after instructions that only fall through. So uprobes attached after
// injection at every instruction of every patched entry, up to the patch's
// end, fire, the target runs on with the right results, removing them
// leaves dyni's entries whole, and -undo then brings back the file's bytes,
// the pads' too. `padded`: how many entries at least go through a pad.
void uprobes_at_every_instruction(DyniHost& host, const std::string& program, const std::string& name,
                                  std::size_t padded) {
  std::string exe = host.install_program(program, name);
  auto file = elf::ElfFile::open(exe);
  ASSERT_TRUE(file) << file.error().message();
  auto table = elf::FunctionTable::build(*file, &*file);
  ASSERT_TRUE(table) << table.error().message();
  pid_t pid = host.spawn({exe, "60", "0"});  // main works, in the original run() it entered before injection
  RemovesPerfMap removes{pid};
  host.write_config({name}, std::string(kFastOptions) +
                                "profile_min_samples = 600\nprofile_max_seconds = 20\nprobe_safe_entries = true\n");
  host.license_this_host();
  RunResult started = host.dyni({"-start"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  ASSERT_TRUE(host.wait_for_state(pid, "dynimized", 40s)) << host.state_of(pid) << host.log();
  auto maps = profiler::read_maps(pid);
  ASSERT_TRUE(maps);
  uint64_t base = 0;
  for (const auto& m : *maps)
    if (m.path == exe && m.offset == 0) base = m.start;
  struct Probe {
    uint64_t addr;  // run-time
    int fd;
  };
  struct Entry {
    uint64_t addr;  // run-time start
    std::vector<uint8_t> file;
  };
  constexpr std::size_t kSpan = 64;  // past the furthest entry patch (jit::kMaxEntryPatchOffset + 5)
  std::vector<Probe> probes;
  std::vector<Entry> entries;
  std::size_t short_jumps = 0;
  const CodeChanges patched = code_changes(pid, exe, base, *table);  // before the probes' int3s
  for (const auto& f : table->functions()) {
    if (f.size < 8) continue;
    const std::size_t n = std::min<std::size_t>(kSpan, f.size);
    std::vector<uint8_t> original = file_bytes(exe, f.addr, n), live = live_bytes(pid, base + f.addr, n);
    if (live == original) continue;  // not patched
    std::size_t first_changed = n, last_changed = 0;
    for (std::size_t k = 0; k < n; ++k)
      if (live[k] != original[k]) first_changed = std::min(first_changed, k), last_changed = k;
    short_jumps += live[first_changed] == jit::kJmpRel8Opcode && last_changed == first_changed + 1;
    entries.push_back({base + f.addr, original});
    for (uint64_t at : instruction_starts(exe, f, last_changed + 1)) {
      EXPECT_EQ(live[at - f.addr], original[at - f.addr])
          << elf::display_name(f) << "+" << at - f.addr << ": dyni changed a byte where an instruction begins";
      int fd = open_uprobe(pid, exe, at);
      ASSERT_GE(fd, 0) << errno_text();
      probes.push_back({base + at, fd});
    }
  }
  ASSERT_GE(entries.size(), 3u) << "patched entries";
  EXPECT_GE(short_jumps, padded) << "entries through a pad: " << target_json(host, pid).dump();
  EXPECT_EQ(patched.outside, short_jumps * 5) << "each short jump's pad: 5 bytes outside every function";
  nlohmann::json d = target_json(host, pid)["dynimized"];
  EXPECT_EQ(d["entries_at_first_byte"].value("count", 99u), 0u) << d.dump();
  EXPECT_EQ(d["entries_unsafe_for_uprobes"].value("count", 99u), 0u) << d.dump();
  std::this_thread::sleep_for(1500ms);
  uint64_t fired = 0;
  for (const Probe& p : probes) fired += hits(p.fd);
  std::printf("%zu uprobes on %zu patched entries (%zu through a pad): %lu hits\n", probes.size(), entries.size(),
              short_jumps, static_cast<unsigned long>(fired));
  EXPECT_GT(fired, 0u) << "the probes fire";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the target died with probes attached: status " << status;
  for (const Probe& p : probes) close(p.fd);
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the target died after the probes went: status " << status;
  RunResult undo = host.dyni({"-undo"});
  EXPECT_EQ(undo.exit_code, 0) << undo.out << undo.err;
  for (const Entry& e : entries) EXPECT_EQ(live_bytes(pid, e.addr, e.file.size()), e.file) << std::hex << e.addr;
  CodeChanges undone = code_changes(pid, exe, base, *table);
  EXPECT_EQ(undone.outside + undone.inside, 0u) << "every byte of the code is the file's again, the pads' too";
  // Redone, the pads and their short jumps come back; the results stay right.
  RunResult redo = host.dyni({"-redo"});
  EXPECT_EQ(redo.exit_code, 0) << redo.out << redo.err;
  const CodeChanges again = code_changes(pid, exe, base, *table);
  EXPECT_EQ(again.outside, patched.outside) << redo.out;
  EXPECT_EQ(again.inside, patched.inside) << redo.out;
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the target died after -redo: status " << status;
  kill(pid, SIGTERM);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "target ended otherwise: status " << status;
}

TEST_F(Daemon, UprobesAttachedAfterInjectionAtEveryInstructionOfPatchedEntriesFireAndTheTargetRunsOn) {
  uprobes_at_every_instruction(host, DYNI_TEST_HOT, "dyni-hot-upa", 0);
}

// Functions aligned as -O2 aligns them leave padding between them: the
// entries with no room for the 5-byte jmp before their first branch go
// through a pad (jit/entry_pads.h), and a uprobe at any instruction leaves
// them whole too.
TEST_F(Daemon, UprobesAtEveryInstructionOfEntriesThroughPadsFireAndUndoPutsThePadsBack) {
  uprobes_at_every_instruction(host, DYNI_TEST_HOT_ALIGNED, "dyni-hot-pad", 1);  // hot_short_entry
}

}  // namespace
}  // namespace dyni::test
