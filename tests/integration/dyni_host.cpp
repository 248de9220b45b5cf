// Test fixture plumbing: private paths, process spawning, status polling.
#include "tests/integration/dyni_host.h"

#include <sys/prctl.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dynid/cache_scan.h"
#include "profiler/process_maps.h"

extern char** environ;

namespace dyni::test {
namespace {

std::string slurp(int fd) {
  std::string s;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<std::size_t>(n));
  return s;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

DyniHost::DyniHost() {
  char tmpl[] = "/tmp/dyni-test-XXXXXX";
  dir_ = ::mkdtemp(tmpl);
  ::chmod(dir_.c_str(), 0755);  // programs copied here must be runnable by `nobody`
  std::ofstream(dir_ + "/machine-id") << "0123456789abcdef0123456789abcdef\n";
  std::filesystem::create_directory(bin_dir());
  ::chmod(bin_dir().c_str(), 0755);
}

DyniHost::~DyniHost() {
  if (pid_t pid = daemon_pid(); pid > 0) {
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 100 && alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(pid, SIGKILL);
  }
  for (pid_t pid : targets_) kill_target(pid);
  std::filesystem::remove_all(dir_);
}

std::vector<std::string> DyniHost::environment() const {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!std::string(*e).starts_with("DYNI_")) env.push_back(*e);
  env.push_back("DYNI_CONFIG=" + config_path());
  env.push_back("DYNI_RUN_DIR=" + run_dir());
  env.push_back("DYNI_STATE_DIR=" + dir_ + "/state");
  env.push_back("DYNI_MACHINE_ID=" + dir_ + "/machine-id");
  env.push_back(std::string("DYNI_DYNID=") + DYNI_TEST_DYNID);
  env.push_back("DYNI_BIN_DIRS=" + bin_dir());
  return env;
}

void DyniHost::write_config(const std::vector<std::string>& exe_list, const std::string& rest) {
  std::string text = "[exeList]\n";
  for (const auto& e : exe_list) text += e + "\n";
  text += rest;
  text += "log_file = " + log_path() + "\n";
  // The host's node_exporter directory is never a test's.
  if (rest.find("metrics_textfile") == std::string::npos) text += "metrics_textfile =\n";
  if (std::filesystem::exists(dir_ + "/license-public.pem"))
    text += "[license]\npublic_key = " + dir_ + "/license-public.pem\n";
  write_raw_config(text);
}

void DyniHost::write_raw_config(const std::string& text) {
  std::string tmp = config_path() + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, config_path());
}

void DyniHost::license_this_host() {
  RunResult keygen = run({DYNI_TEST_TOKEN_TOOL, "keygen", "--dir", dir_});
  if (keygen.exit_code != 0) throw std::runtime_error("keygen failed: " + keygen.err);
  // Re-write the config so it names the new key, keeping its [exeList] and options.
  std::string text = read_text(config_path());
  if (text.find("[license]") == std::string::npos)
    write_raw_config(text + "[license]\npublic_key = " + dir_ + "/license-public.pem\n");
  RunResult mint = run({DYNI_TEST_TOKEN_TOOL, "mint", "--key", dir_ + "/license-private.pem",
                        "--subscription", "test-sub", "--hosts", "2", "--expires", "2099-01-01"});
  std::string token = mint.out.substr(0, mint.out.find('\n'));
  RunResult bound = dyni({"-license=start", "-token=" + token});
  if (bound.exit_code != 0) throw std::runtime_error("license start failed: " + bound.err);
}

RunResult DyniHost::dyni(const std::vector<std::string>& args, std::optional<uid_t> uid) const {
  std::vector<std::string> argv = {DYNI_TEST_DYNI};
  if (uid) argv[0] = install_program(DYNI_TEST_DYNI, "dyni-as-user");
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, uid);
}

RunResult DyniHost::run(const std::vector<std::string>& argv, std::optional<uid_t> uid) const {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  std::vector<std::string> env = environment();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::close(out[0]);
    ::close(err[0]);
    if (uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*uid, *uid, *uid) != 0 ||
                ::setresuid(*uid, *uid, *uid) != 0))
      _exit(126);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    args.push_back(nullptr);
    envp.push_back(nullptr);
    ::execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  // Read both pipes without deadlock: stderr is small, read it after stdout.
  RunResult r;
  r.out = slurp(out[0]);
  r.err = slurp(err[0]);
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string DyniHost::install_program(const std::string& source, const std::string& name) const {
  std::string path = dir_ + "/" + name;
  std::filesystem::copy_file(source, path, std::filesystem::copy_options::overwrite_existing);
  ::chmod(path.c_str(), 0755);
  return path;
}

pid_t DyniHost::spawn(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  targets_.push_back(pid);
  return pid;
}

void DyniHost::kill_target(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

nlohmann::json DyniHost::status_json() const {
  RunResult r = dyni({"-status", "-json"});
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

bool DyniHost::wait_for(const std::function<bool(const nlohmann::json&)>& ready,
                        std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready(status_json())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string DyniHost::state_of(pid_t pid) const {
  nlohmann::json j = status_json();
  for (const auto& t : j.value("targets", nlohmann::json::array()))
    if (t.value("pid", 0) == pid) return t.value("status", "");
  return "";
}

bool DyniHost::wait_for_state(pid_t pid, const std::string& state,
                              std::chrono::milliseconds timeout) const {
  return wait_for(
      [&](const nlohmann::json& j) {
        for (const auto& t : j.value("targets", nlohmann::json::array()))
          if (t.value("pid", 0) == pid) return t.value("status", "") == state;
        return state.empty();
      },
      timeout);
}

nlohmann::json DyniHost::dynimized_with_files(pid_t pid, std::chrono::milliseconds timeout) const {
  nlohmann::json facts = nlohmann::json::object();
  auto named = [&](const char* file, const char* error) {
    return facts.contains(file) && (facts[file].is_string() || !facts.value(error, "").empty());
  };
  bool ready = wait_for(
      [&](const nlohmann::json& j) {
        for (const auto& t : j.value("targets", nlohmann::json::array()))
          if (t.value("pid", 0) == pid) facts = t.value("dynimized", nlohmann::json::object());
        return named("perf_map", "perf_map_error") && named("gdb_command", "gdb_error");
      },
      timeout);
  return ready ? facts : nlohmann::json::object();
}

pid_t DyniHost::daemon_pid() const {
  std::string text = read_text(run_dir() + "/dynid.lock");
  pid_t pid = static_cast<pid_t>(std::atoi(text.c_str()));
  if (pid <= 0 || !alive(pid)) return 0;
  return pid;
}

bool DyniHost::alive(pid_t pid) {
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  std::size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' &&
         stat[close + 2] != 'X';
}

std::string DyniHost::log() const { return read_text(log_path()); }

std::string perf_style_name(const std::string& name) {
  int depth = 0;
  std::size_t name_start = 0, params = name.size();
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '<') ++depth;
    else if (c == '>') --depth;
    else if (c == ' ' && depth == 0) name_start = i + 1;
    else if (c == '(' && depth == 0 && i > 0) {
      params = i;
      break;
    }
  }
  if (name_start > params) name_start = 0;
  return name.substr(name_start, params - name_start);
}

std::vector<std::string> under_redis_unit_filters(const std::string& dir) {
  const std::string lists = std::string(DYNI_SOURCE_DIR) + "/tests/programs/scripts/systemd_syscalls.sh";
  const std::string allow = dir + "/system-service.syscalls", deny = dir + "/privileged-resources.syscalls";
  if (std::system((lists + " @system-service > '" + allow + "' 2>/dev/null").c_str()) != 0 ||
      std::system((lists + " @privileged @resources > '" + deny + "' 2>/dev/null").c_str()) != 0)
    return {};
  std::vector<std::string> prefix = {DYNI_TEST_SECCOMP_EXEC, "--allow-file", allow, "--deny-file", deny,
                                     "--mdwe-seccomp"};
  if (::prctl(66 /* PR_GET_MDWE, Linux 6.3 */, 0, 0, 0, 0) >= 0) prefix.push_back("--mdwe-prctl");
  return prefix;
}

int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

bool text_equals_file(pid_t pid, const std::string& exe) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::ifstream file(exe, std::ios::binary);
  std::ifstream mem("/proc/" + std::to_string(pid) + "/mem", std::ios::binary);
  int compared = 0;
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0, offset = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx", &lo, &hi, perms, &offset) != 4) continue;
    if (std::string(perms).substr(0, 3) != "r-x" || line.find(exe) == std::string::npos) continue;
    std::string live(hi - lo, '\0'), disk(hi - lo, '\0');
    mem.seekg(static_cast<std::streamoff>(lo));
    mem.read(live.data(), static_cast<std::streamsize>(live.size()));
    file.seekg(static_cast<std::streamoff>(offset));
    file.read(disk.data(), static_cast<std::streamsize>(disk.size()));
    std::size_t n = static_cast<std::size_t>(file.gcount());  // the last page may run past the file
    if (!mem || n == 0 || live.compare(0, n, disk, 0, n) != 0) return false;
    ++compared;
  }
  return compared > 0;
}

std::size_t caches_in(pid_t pid, CacheTier tier) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return 0;
  std::vector<CacheRecord> records = find_cache_records(pid, *maps);
  return static_cast<std::size_t>(std::count_if(records.begin(), records.end(), [&](const CacheRecord& r) { return r.tier == tier; }));
}

}  // namespace dyni::test
