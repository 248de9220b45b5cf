// Command-line flags of `dyni`, Dynimize-compatible single-dash style.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::cli {

enum class Action {
  Start, Stop, Status, Metrics, Profile, Addr2Orig, Caches, Undo, Redo, Reload,
  LicenseStart, LicenseStop, LicenseStatus, Version, Help,
};

struct Command {
  Action action = Action::Help;
  bool json = false;   // -status -json, -profile=PID -json
  long pid = 0;        // -profile=PID, -addr2orig=PID
  std::vector<uint64_t> addresses;  // -addr2orig=PID ADDR...
  std::string token;   // -license=start|stop -token=T
};

// Exactly one action; -json only with -status or -profile; -token only with -license=start|stop.
Result<Command> parse_args(const std::vector<std::string>& args);

extern const char* const kUsage;

// Exit codes, documented in README.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotRunning = 3;

}  // namespace dyni::cli
