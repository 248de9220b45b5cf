// Whole-file reads, atomic write, directory creation and listing.
#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <string_view>

#include "common/errno_text.h"

namespace dyni {

namespace {

// Reads `fd` to its end, at most `max_bytes`, and closes it. Errors say
// "cannot read <what>: <reason>".
Result<std::string> read_all(int fd, const std::string& what, std::size_t max_bytes) {
  std::string content;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    content.append(buf, static_cast<std::size_t>(n));
    if (content.size() > max_bytes) {
      ::close(fd);
      return fail("cannot read " + what + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  int err = errno;
  ::close(fd);
  if (n < 0) return fail(sys_error("cannot read " + what, err));
  return content;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unusual file";
}

}  // namespace

Result<std::string> read_file(const std::string& path, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(sys_error("cannot read " + path));
  return read_all(fd, path, max_bytes);
}

Result<std::string> read_file_range(const std::string& path, uint64_t offset, std::size_t length) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(sys_error("cannot read " + path));
  std::string out(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return fail(sys_error("cannot read " + path, err));
    }
    if (n == 0) break;  // the file ends
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

Result<std::string> read_regular_file(const std::string& path, std::size_t max_bytes,
                                      const std::string& label) {
  std::string what = label.empty() ? path : label + " " + path;
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return fail(sys_error("cannot read " + what));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return fail(sys_error("cannot read " + what, err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("cannot read " + what + ": it is " + file_kind(st.st_mode) + ", not a regular file");
  }
  return read_all(fd, what, max_bytes);
}

Status write_all(int fd, const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write: " + errno_text());
    at += static_cast<std::size_t>(n);
  }
  return ok();
}

Status write_file_atomic(const std::string& path, const std::string& content, mode_t mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return fail(sys_error("cannot write " + tmp));
  bool written = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  bool synced = written && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = synced ? errno : err;
    ::unlink(tmp.c_str());
    return fail(sys_error("cannot write " + path, err));
  }
  return ok();
}

Status ensure_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return fail(sys_error("cannot create directory " + path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fail(sys_error("cannot stat " + path));
  if (!S_ISDIR(st.st_mode)) return fail(path + " exists and is not a directory");
  if ((st.st_mode & 07777) != mode && ::chmod(path.c_str(), mode) != 0)
    return fail(sys_error("cannot chmod " + path));
  return ok();
}

Status ensure_dir_p(const std::string& path, mode_t mode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return ok();
    return fail(path + " exists and is not a directory");
  }
  std::size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto parent = ensure_dir_p(path.substr(0, slash), 0755); !parent) return parent;
  }
  return ensure_dir(path, mode);
}

std::vector<pid_t> list_numeric_entries(const std::string& dir) {
  std::vector<pid_t> ids;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return ids;
  while (dirent* entry = ::readdir(d)) {
    pid_t id = 0;
    std::string_view name(entry->d_name);
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
    if (ec == std::errc() && end == name.data() + name.size() && id > 0) ids.push_back(id);
  }
  ::closedir(d);
  return ids;
}

}  // namespace dyni
