// The control protocol between `dyni` and `dynid` over the Unix socket.
//
// One request per connection: the client sends one line of JSON,
//   {"version":1,"command":"status","args":{...}}\n
// and the daemon answers with one line and closes:
//   {"version":1,"ok":true,"message":"...","data":{...}}\n
// A request line longer than kMaxRequestBytes, not JSON, of another version or
// with an unknown command gets {"ok":false,...} and a close.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "common/result.h"

namespace dyni::protocol {

inline constexpr int kVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 64 * 1024;
inline constexpr std::size_t kMaxResponseBytes = 64 * 1024 * 1024;

// Commands the daemon answers.
namespace cmd {
inline constexpr const char* kPing = "ping";
inline constexpr const char* kStatus = "status";
inline constexpr const char* kProfile = "profile";
inline constexpr const char* kStop = "stop";
inline constexpr const char* kReload = "reload";
inline constexpr const char* kUndo = "undo";
inline constexpr const char* kRedo = "redo";
inline constexpr const char* kLicenseChanged = "license-changed";
}  // namespace cmd

bool is_known_command(std::string_view command);

struct Request {
  std::string command;
  nlohmann::json args = nlohmann::json::object();
};

struct Response {
  bool ok = true;
  std::string message;
  nlohmann::json data = nlohmann::json::object();
};

std::string encode(const Request& request);   // one line, '\n'-terminated
std::string encode(const Response& response); // one line, '\n'-terminated
Result<Request> decode_request(std::string_view line);
Result<Response> decode_response(std::string_view line);

inline Response error_response(std::string message) {
  return Response{false, std::move(message), nlohmann::json::object()};
}

}  // namespace dyni::protocol
