// The verifier (on in all tests, optional in production): decodes emitted code
// back and checks it against the original function through the translation
// table (I6): each instruction is its original with only PC-relative fields
// changed, every RIP-relative operand addresses what it did, and every direct
// branch reaches the new copy of its original target (inside the function) or
// the original target itself (outside).
#pragma once

#include "common/result.h"
#include "jit/cfg.h"
#include "jit/emitter.h"

namespace dyni::jit {

Status verify(const FunctionCfg& original, const EmittedCode& code);

}  // namespace dyni::jit
