// The one error type of the code base: failure is an ordinary result with a reason.
#pragma once

#include <expected>
#include <string>
#include <utility>

namespace dyni {

// A failure with a message a person can read. Messages are complete sentences
// fragments without trailing newline, e.g. "/etc/dyni.conf:7: unknown key 'foo'".
class Error {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthand for `return fail("...")` in a function returning Result<T>.
inline std::unexpected<Error> fail(std::string message) {
  return std::unexpected<Error>(Error(std::move(message)));
}

// Result of an operation that yields nothing but may fail.
using Status = Result<void>;

inline Status ok() { return {}; }

}  // namespace dyni
