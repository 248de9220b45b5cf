// Launching dynid detached (or via systemd) and waiting until it serves.
#include "dyni-cli/daemon_launcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/errno_text.h"
#include "common/paths.h"
#include "dyni-cli/control_client.h"

namespace dyni::cli {
namespace {

bool is_executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// Runs argv to completion; returns its exit status and what it printed on stderr.
Result<std::pair<int, std::string>> run_and_capture(const std::vector<std::string>& argv) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return fail(sys_error("pipe"));
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork"));
  if (pid == 0) {
    ::dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  ::close(err_pipe[1]);
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = ::read(err_pipe[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<std::size_t>(n));
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  while (!err.empty() && err.back() == '\n') err.pop_back();
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (code == 127 && err.empty()) err = "cannot run " + argv[0];
  return std::make_pair(code, err);
}

bool systemd_manages_dynid() {
  // Test and custom setups (paths overridden) run their own dynid.
  for (const char* var : {"DYNI_NO_SYSTEMD", "DYNI_CONFIG", "DYNI_RUN_DIR", "DYNI_STATE_DIR"})
    if (std::getenv(var)) return false;
  struct stat st {};
  if (::stat("/run/systemd/system", &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return ::access("/etc/systemd/system/dynid.service", F_OK) == 0 ||
         ::access("/lib/systemd/system/dynid.service", F_OK) == 0;
}

Status wait_until_serving(int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    auto r = call(paths::socket_file(), {protocol::cmd::kPing, {}}, 1000);
    if (r && r->daemon_running && r->response.ok) return ok();
    ::usleep(50 * 1000);
  }
  return fail("dynid did not come up within " + std::to_string(timeout_ms / 1000) +
              " s; see its log");
}

Status start_with_systemd() {
  auto r = run_and_capture({"systemctl", "start", "dynid.service"});
  if (!r) return std::unexpected(r.error());
  if (r->first != 0)
    return fail("systemctl start dynid failed: " + r->second + " (journalctl -u dynid)");
  return wait_until_serving(10000);
}

// Child side: a new session, no terminal, stdio on /dev/null, then exec dynid
// which reports "ok" or "error: ..." on ready_fd.
[[noreturn]] void exec_detached(const std::string& dynid, const std::string& config, int ready_fd) {
  ::setsid();
  if (::chdir("/") != 0) _exit(126);
  int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);
  // dynid must hold no descriptor of ours: a caller waiting for EOF on a pipe
  // it gave dyni would otherwise wait for as long as dynid runs.
  if (ready_fd != 3) {
    ::dup2(ready_fd, 3);
    ready_fd = 3;
  }
  ::close_range(4, ~0U, 0);
  ::umask(077);
  std::string ready = "--ready-fd=" + std::to_string(ready_fd);
  std::string config_arg = "--config=" + config;
  ::execl(dynid.c_str(), dynid.c_str(), config_arg.c_str(), ready.c_str(), static_cast<char*>(nullptr));
  std::string msg = "error: cannot run " + dynid + ": " + errno_text() + "\n";
  ssize_t n = ::write(ready_fd, msg.data(), msg.size());
  (void)n;
  _exit(127);
}

Status start_detached(const std::string& dynid, const std::string& config) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return fail(sys_error("pipe"));
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork"));
  if (pid == 0) {
    ::close(ready[0]);
    ::fcntl(ready[1], F_SETFD, 0);  // dynid inherits the write end
    exec_detached(dynid, config, ready[1]);
  }
  ::close(ready[1]);
  std::string line;
  char buf[4096];
  for (ssize_t n; (n = ::read(ready[0], buf, sizeof buf)) > 0;) line.append(buf, static_cast<std::size_t>(n));
  ::close(ready[0]);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (line == "ok") return wait_until_serving(10000);
  if (line.starts_with("error: ")) return fail(line.substr(7));
  int status = 0;
  ::waitpid(pid, &status, WNOHANG);
  return fail("dynid exited during start-up without a reason; see its log");
}

}  // namespace

std::string dynid_path() {
  if (const char* env = std::getenv("DYNI_DYNID"); env && *env) return env;
  std::string dir = self_dir();
  for (const std::string& candidate : {dir + "/dynid", dir + "/../sbin/dynid", dir + "/../dynid/dynid"})
    if (is_executable(candidate)) return candidate;
  return "/usr/local/sbin/dynid";
}

Result<int> run_to_completion(const std::vector<std::string>& argv) {
  // Said as an error (exit 1), not as the child's 127.
  if (::access(argv[0].c_str(), X_OK) != 0) return fail("cannot run " + argv[0] + ": " + errno_text() + " (is dyni installed?)");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork"));
  if (pid == 0) {
    ::execv(args[0], args.data());
    std::string msg = "dyni: cannot run " + argv[0] + ": " + errno_text() + "\n";
    ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    (void)n;
    _exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return fail(sys_error("waitpid"));
  if (WIFSIGNALED(status)) return fail(argv[0] + " ended by signal " + std::to_string(WTERMSIG(status)));
  return WEXITSTATUS(status);
}

Status start_daemon(const std::string& config_path) {
  std::string dynid = dynid_path();
  // Validate first so a bad config is reported the same way on every path.
  auto check = run_and_capture({dynid, "--check-config", "--config=" + config_path});
  if (!check) return std::unexpected(check.error());
  if (check->first != 0) return fail(check->second);
  if (systemd_manages_dynid()) return start_with_systemd();
  return start_detached(dynid, config_path);
}

}  // namespace dyni::cli
