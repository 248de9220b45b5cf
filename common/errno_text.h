// strerror for messages: "open /x: No such file or directory".
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace dyni {

inline std::string errno_text(int err = errno) { return std::strerror(err); }

// "<what>: <strerror(errno)>", the usual shape of a system-call failure.
inline std::string sys_error(const std::string& what, int err = errno) {
  return what + ": " + std::strerror(err);
}

}  // namespace dyni
