// Source lines read in a helper process (line_reader.h).
#include "dynid/line_reader.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/errno_text.h"

namespace dyni {
namespace {

constexpr std::size_t kMaxAnswerBytes = 256 << 20;  // a line and a file name for each of ~1 M instructions
constexpr std::size_t kMaxAddresses = 8 << 20;
constexpr std::size_t kMaxFileName = 4096;

// The helper's file descriptors: the debug file is its fd 3.
constexpr int kFileFd = 3;

struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

Status make_pipe(Pipe& p) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(sys_error("pipe2"));
  p.read = fds[0], p.write = fds[1];
  return ok();
}

// Writes every address (the helper reads them all before it answers, so
// this never waits on its answer), by the deadline (a helper stopped by a
// signal must not hold dynid's thread), then closes its stdin.
Status send_addresses(Pipe& to, const std::vector<uint64_t>& addrs, std::chrono::steady_clock::time_point deadline) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(addrs.data());
  std::size_t left = addrs.size() * sizeof(uint64_t);
  if (::fcntl(to.write, F_SETFL, O_NONBLOCK) != 0) return fail(sys_error("fcntl of the line reader's pipe"));
  while (left > 0) {
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (wait.count() <= 0) return fail(fmt::format("the line reader took no addresses in {} s", kLineReaderTimeout.count()));
    pollfd p{to.write, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) continue;
    ssize_t n = ::write(to.write, bytes, left);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return fail(sys_error("writing to the line reader"));
    bytes += n, left -= static_cast<std::size_t>(n);
  }
  ::close(to.write);
  to.write = -1;
  return ok();
}

// Everything the helper writes, until it closes its stdout or the deadline.
Result<std::vector<uint8_t>> receive(int fd, std::chrono::steady_clock::time_point deadline) {
  std::vector<uint8_t> out;
  uint8_t chunk[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(fmt::format("the line reader did not answer in {} s", kLineReaderTimeout.count()));
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(sys_error("reading the line reader's answer"));
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > kMaxAnswerBytes) return fail("the line reader answered too much");
    out.insert(out.end(), chunk, chunk + n);
  }
}

// How the helper ended, for the message; kills it first if it still runs.
std::string reap(pid_t pid, bool kill_it) {
  if (kill_it) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return WEXITSTATUS(status) == 0 ? "" : fmt::format("exited with {}", WEXITSTATUS(status));
}

// Runs the helper on the open debug file `fd`.
Result<std::vector<std::optional<SourceLine>>> ask_helper(const std::string& helper, int fd, const std::string& build_id,
                                                          const std::vector<uint64_t>& addrs) {
  Pipe in, out;
  if (auto r = make_pipe(in); !r) return std::unexpected(r.error());
  if (auto r = make_pipe(out); !r) return std::unexpected(r.error());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.read, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, kFileFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kFileFd + 1);
  const std::string id = build_id.empty() ? "-" : build_id;
  char* argv[] = {const_cast<char*>("dyni-lines"), const_cast<char*>(id.c_str()), nullptr};
  char* envp[] = {nullptr};
  // No signal blocked in the helper (the calling thread's mask is not its).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int err = posix_spawn(&pid, helper.c_str(), &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return fail(sys_error("cannot start the line reader " + helper, err));
  ::close(in.read), in.read = -1;
  ::close(out.write), out.write = -1;
  const auto deadline = std::chrono::steady_clock::now() + kLineReaderTimeout;
  auto sent = send_addresses(in, addrs, deadline);
  auto answer = sent ? receive(out.read, deadline) : Result<std::vector<uint8_t>>(std::unexpected(sent.error()));
  const std::string ended = reap(pid, !answer);
  if (!answer) return fail(answer.error().message() + (ended.empty() ? "" : "; it was " + ended));
  if (!ended.empty()) return fail("the line reader was " + ended + " (malformed debug info?)");
  return parse_line_answers(*answer, addrs.size());
}

// The helper gives up root before it parses anything: a file that gets the
// better of LLVM's reader then runs as nobody, with no new privileges.
Status drop_privileges() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(sys_error("PR_SET_NO_NEW_PRIVS"));
  if (::geteuid() != 0) return ok();
  const gid_t nogroup = 65534;
  const uid_t nobody = 65534;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(nogroup, nogroup, nogroup) != 0 ||
      ::setresuid(nobody, nobody, nobody) != 0)
    return fail(sys_error("dropping root"));
  return ok();
}

void write_all_fd(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

}  // namespace

std::string line_reader_path() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "dyni-lines";
  std::string dir(self, static_cast<std::size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  const std::string beside = dir + "/dyni-lines";
  if (::access(beside.c_str(), X_OK) == 0) return beside;
  return dir.substr(0, dir.rfind('/')) + "/libexec/dyni/dyni-lines";
}

Result<std::vector<std::optional<SourceLine>>> read_source_lines(const std::string& path, const std::string& build_id,
                                                                 const std::vector<uint64_t>& addrs,
                                                                 const std::string& helper) {
  if (addrs.size() > kMaxAddresses) return fail("too many addresses for the line reader");
  const std::string exe = helper.empty() ? line_reader_path() : helper;
  std::string why;
  for (const std::string& candidate : debug_info_candidates(path, build_id)) {
    auto fd = open_debug_info(candidate);
    auto lines = fd ? ask_helper(exe, *fd, build_id, addrs) : Result<std::vector<std::optional<SourceLine>>>(
                                                                  std::unexpected(fd.error()));
    if (fd) ::close(*fd);
    if (lines) return lines;
    why += (why.empty() ? "" : "; ") + (fd ? candidate + ": " : "") + lines.error().message();
  }
  return fail("no source lines: " + why);
}

Result<std::vector<std::optional<SourceLine>>> parse_line_answers(std::span<const uint8_t> answer, std::size_t count) {
  if (answer.empty()) return fail("the line reader answered nothing");
  if (answer[0] == 'e')
    return fail(std::string(reinterpret_cast<const char*>(answer.data()) + 1, std::min<std::size_t>(answer.size() - 1, 512)));
  if (answer[0] != 'k') return fail("the line reader's answer does not parse");
  std::vector<std::optional<SourceLine>> out(count);
  std::size_t at = 1;
  auto u32 = [&](uint32_t& v) {
    if (answer.size() - at < sizeof v) return false;
    std::memcpy(&v, answer.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  while (at < answer.size()) {
    uint32_t index = 0, line = 0, length = 0;
    if (!u32(index) || !u32(line) || !u32(length) || index >= count || line == 0 || length > kMaxFileName ||
        answer.size() - at < length || out[index])
      return fail("the line reader's answer does not parse");
    out[index] = SourceLine{std::string(reinterpret_cast<const char*>(answer.data()) + at, length), line};
    at += length;
  }
  return out;
}

int serve_source_lines(int file_fd, const std::string& build_id, int in, int out) {
  auto answer_error = [&](const std::string& why) {
    write_all_fd(out, "e" + why);
    return 0;  // an answer, not a failure of the helper
  };
  if (auto dropped = drop_privileges(); !dropped) return answer_error(dropped.error().message());
  rlimit cpu{60, 60};
  (void)::setrlimit(RLIMIT_CPU, &cpu);
  std::vector<uint64_t> addrs;
  uint8_t chunk[65536];
  std::string pending;
  for (;;) {
    ssize_t n = ::read(in, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return answer_error("cannot read the addresses");
    if (n == 0) break;
    pending.append(reinterpret_cast<const char*>(chunk), static_cast<std::size_t>(n));
    std::size_t used = 0;
    for (; pending.size() - used >= sizeof(uint64_t); used += sizeof(uint64_t)) {
      uint64_t a = 0;
      std::memcpy(&a, pending.data() + used, sizeof a);
      addrs.push_back(a);
    }
    pending.erase(0, used);
    if (addrs.size() > kMaxAddresses) return answer_error("too many addresses");
  }
  auto bytes = read_debug_info(file_fd);
  if (!bytes) return answer_error(bytes.error().message());
  auto lines = SourceLines::from_bytes(std::move(*bytes), "the debug file", build_id == "-" ? "" : build_id);
  if (!lines) return answer_error(lines.error().message());
  std::string answer = "k";
  for (std::size_t i = 0; i < addrs.size(); ++i) {
    auto at = lines->at(addrs[i]);
    if (!at || at->file.size() > kMaxFileName) continue;
    put_u32(answer, static_cast<uint32_t>(i));
    put_u32(answer, at->line);
    put_u32(answer, static_cast<uint32_t>(at->file.size()));
    answer += at->file;
  }
  write_all_fd(out, answer);
  return 0;
}

}  // namespace dyni
