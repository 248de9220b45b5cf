// Names of target states as -status prints them.
#include "dynid/target.h"

namespace dyni {

const char* state_name(TargetState state) {
  switch (state) {
    case TargetState::Waiting: return "waiting";
    case TargetState::Profiling: return "profiling";
    case TargetState::Dynimizing: return "dynimizing";
    case TargetState::Dynimized: return "dynimized";
    case TargetState::Undone: return "undone";
    case TargetState::Unsupported: return "unsupported";
    case TargetState::Failed: return "failed";
    case TargetState::Unlicensed: return "unlicensed";
  }
  return "failed";
}

std::string state_text(const Target& target) {
  std::string text = state_name(target.state);
  if (!target.reason.empty()) text += ": " + target.reason;
  return text;
}

}  // namespace dyni
