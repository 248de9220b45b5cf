// Daemon log sink: timestamped lines with DYNID-<LEVEL> prefixes.
#include "common/log.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <ctime>
#include <mutex>

#include "common/errno_text.h"

namespace dyni::log {
namespace {

std::mutex g_mutex;
int g_fd = STDERR_FILENO;
std::string g_path;
bool g_debug = false;

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
  std::string line = fmt::format("{} {} {}\n", timestamp(), prefix(level), text);
  std::lock_guard lock(g_mutex);
  // One write per line keeps lines whole when several threads log at once.
  ssize_t n = ::write(g_fd, line.data(), line.size());
  (void)n;  // Nowhere left to report a failing log write.
}

}  // namespace dyni::log
