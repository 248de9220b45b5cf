// The client side of the control socket: one request, one response.
#pragma once

#include <string>

#include "common/protocol.h"
#include "common/result.h"

namespace dyni::cli {

struct CallResult {
  bool daemon_running = true;  // false: no socket, or nobody listening
  protocol::Response response;
};

// Sends `request` to the daemon at `socket_path` and waits up to `timeout_ms`.
// A daemon that is not running is a normal result, not an error.
Result<CallResult> call(const std::string& socket_path, const protocol::Request& request,
                        int timeout_ms = 10000);

}  // namespace dyni::cli
