// The verifier (on in all tests, optional in production): decodes emitted code
// back and checks it against the original function through the translation
// table (I6):
//   - the first cache instruction is the function's entry;
//   - each copied instruction is its original with only PC-relative fields
//     changed (an inverted jcc: only the condition's low bit), every
//     RIP-relative operand addresses what it did;
//   - every branch reaches the image of its original target: the copy of that
//     instruction when there is one, else the original instruction; outside
//     the function, the redirect or the original target;
//   - where an instruction falls through, the next cache instruction continues
//     at the original successor (through dropped jmps), and an added jmp goes
//     to the image of the address it stands for;
//   - the copy never runs past its end: every instruction that can fall
//     through is followed by its successor's image, past the function's end
//     too (a last jcc or call continues at the original fall-through);
//   - no exit (a branch out of the copy, an added jmp, a copied jump table's
//     entry) lands in bytes an entry patch overwrites, except on a patch's
//     first byte of another function (which enters that function's copy) or
//     of this one when the bytes there were copied;
//   - an original instruction missing from the cache in a copied region can
//     only be a dropped direct jmp.
#pragma once

#include <cstdint>
#include <map>

#include "common/result.h"
#include "jit/cfg.h"
#include "jit/emitter.h"

namespace dyni::jit {

// The original bytes entry patches overwrite: patch address → end (exclusive).
using PatchedBytes = std::map<uint64_t, uint64_t>;

Status verify(const FunctionCfg& original, const EmittedCode& code, const Redirects& redirects = {},
              const PatchedBytes& patched = {});

}  // namespace dyni::jit
