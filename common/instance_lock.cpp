// flock-based single-instance lock for dynid.
#include "common/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/errno_text.h"
#include "common/file_io.h"

namespace dyni {

Result<InstanceLock> InstanceLock::acquire(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail(sys_error("cannot open lock file " + path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) return fail(sys_error("cannot lock " + path, err));
    auto holder = read_file(path, 64);
    std::string pid = holder ? *holder : "?";
    while (!pid.empty() && pid.back() == '\n') pid.pop_back();
    return fail(std::string(kAlreadyRunning) + " (pid " + pid + ")");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    int err = errno;
    ::close(fd);
    return fail(sys_error("cannot write lock file " + path, err));
  }
  return InstanceLock(fd);
}

bool InstanceLock::is_held(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // closing drops our shared lock if we got it
  return held;
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace dyni
