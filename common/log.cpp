// Daemon log sink: timestamped lines with DYNID-<LEVEL> prefixes.
#include "common/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "common/errno_text.h"

namespace dyni::log {
namespace {

std::mutex g_mutex;
int g_fd = STDERR_FILENO;
std::string g_path;
bool g_debug = false;
bool g_journal = false;  // stderr is journald's stream: lines carry their priority

// Under systemd, stderr may be journald's stream: JOURNAL_STREAM then names
// its device and inode (systemd.exec(5)). Compared with fd 2's, so that a
// stderr the operator redirected elsewhere keeps plain lines.
bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long dev = 0, ino = 0;
  struct stat st{};
  if (!stream || std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2 || ::fstat(STDERR_FILENO, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

// syslog(3) priorities, as journald reads them from a "<N>" line prefix.
int priority(Level level) {
  switch (level) {
    case Level::Debug: return 7;
    case Level::Info: return 6;
    case Level::Warn: return 4;
    case Level::Error: return 3;
  }
  return 6;
}

const char* prefix(Level level) {
  switch (level) {
    case Level::Debug: return "DYNID-DEBUG";
    case Level::Info: return "DYNID-INFO";
    case Level::Warn: return "DYNID-WARN";
    case Level::Error: return "DYNID-ERROR";
  }
  return "DYNID-INFO";
}

std::string timestamp() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm t{};
  gmtime_r(&tv.tv_sec, &t);
  char buf[40];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(tv.tv_usec / 1000));
}

Result<int> open_append(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return fail(sys_error("cannot open log file " + path));
  return fd;
}

}  // namespace

Status open_file(const std::string& path) {
  auto fd = open_append(path);
  if (!fd) return std::unexpected(fd.error());
  std::lock_guard lock(g_mutex);
  if (g_fd != STDERR_FILENO) ::close(g_fd);
  g_fd = *fd;
  g_path = path;
  return ok();
}

void use_stderr() {
  std::lock_guard lock(g_mutex);
  if (g_fd != STDERR_FILENO) ::close(g_fd);
  g_fd = STDERR_FILENO;
  g_path.clear();
  g_journal = stderr_is_journal();
}

// Reopens the log file by name, so logrotate can move the old one away.
Status reopen() {
  std::string path;
  {
    std::lock_guard lock(g_mutex);
    path = g_path;
  }
  if (path.empty()) return ok();
  return open_file(path);
}

void set_debug(bool enabled) { g_debug = enabled; }

void write(Level level, const std::string& text) {
  if (level == Level::Debug && !g_debug) return;
  std::lock_guard lock(g_mutex);
  // journald takes the priority from "<N>" and drops it from the message.
  std::string line = fmt::format("{}{} {} {}\n", g_journal && g_fd == STDERR_FILENO ? fmt::format("<{}>", priority(level)) : "",
                                 timestamp(), prefix(level), text);
  // One write per line keeps lines whole when several threads log at once.
  ssize_t n = ::write(g_fd, line.data(), line.size());
  (void)n;  // Nowhere left to report a failing log write.
}

}  // namespace dyni::log
