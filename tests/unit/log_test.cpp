// common/log.h: plain lines to a file or stderr, and under systemd, where
// stderr is journald's stream, each line's priority for journald.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/log.h"

namespace dyni {
namespace {

// What the log writes to stderr when stderr is a pipe and JOURNAL_STREAM
// is `stream` ("" unset; "pipe": the pipe's own device and inode).
std::string logged_with(const std::string& stream) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fds[1], STDERR_FILENO);
  struct stat st{};
  ::fstat(fds[1], &st);
  if (stream.empty()) ::unsetenv("JOURNAL_STREAM");
  else ::setenv("JOURNAL_STREAM", stream == "pipe" ? (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str()
                                                   : stream.c_str(), 1);
  log::use_stderr();
  log::warn("disk {} full", "/var");
  log::error("gone");
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fds[1]);
  char buf[4096];
  ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ::unsetenv("JOURNAL_STREAM");
  log::use_stderr();
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

TEST(Log, JournaldGetsEachLinesPriorityOnlyWhenStderrIsItsStream) {
  const std::string journal = logged_with("pipe");
  EXPECT_EQ(journal.rfind("<4>", 0), 0u) << journal;
  EXPECT_NE(journal.find(" DYNID-WARN disk /var full\n<3>"), std::string::npos) << journal;
  EXPECT_NE(journal.find(" DYNID-ERROR gone\n"), std::string::npos) << journal;
  for (const std::string& other : {std::string(""), std::string("1:2"), std::string("junk")}) {
    const std::string plain = logged_with(other);
    EXPECT_EQ(plain.find('<'), std::string::npos) << other << ": " << plain;
    EXPECT_NE(plain.find("Z DYNID-WARN disk /var full\n"), std::string::npos) << other << ": " << plain;
  }
}

}  // namespace
}  // namespace dyni
