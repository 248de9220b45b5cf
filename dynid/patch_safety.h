// Whether each entry patch may be written in this stop window (I1, I4):
//  - no thread can be inside the bytes the patch replaces: no thread's PC,
//    no PC a signal frame will return to, no return address lies strictly
//    inside [addr, addr + 5), or a short jump's 2 bytes. (A PC at `addr` itself is fine: it then runs
//    the jmp, into the copy of the same code. The jit already refuses entries
//    whose first bytes hold a call, so a return address there means a stack
//    it does not understand.) A thread whose stack could not be unwound to
//    its end proves nothing: every site waits for a later window.
//  - the live bytes still equal the file's: a uprobe's int3, a debugger's
//    breakpoint or another patcher's work means the function is left alone
//    (removing the uprobe later would write its byte into dyni's jump).
// Pure: the stacks and the live bytes are read by the caller.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/thread_unwind.h"

namespace dyni {

constexpr std::size_t kPatchBytes = 5;

struct PatchSite {
  uint64_t addr = 0;                            // run-time address of the entry bytes
  std::array<uint8_t, kPatchBytes> original{};  // the file's bytes there
  // How many of the 5 change: a short jump to a pad changes 2 (the next
  // instruction, which may begin after them, is written as it is).
  std::size_t changed = kPatchBytes;
};

enum class SiteVerdict {
  Patch,       // safe now
  Wait,        // a thread is inside, or a stack is unknown: try a later window
  LeaveAlone,  // the live bytes differ from the file's: never patch
};

struct SiteCheck {
  SiteVerdict verdict = SiteVerdict::Patch;
  std::string reason;  // empty for Patch
};

// `stacks`: every held thread's stack, by thread id. `live`: reads the
// target's current bytes at an address.
std::vector<SiteCheck> check_patch_sites(
    std::span<const PatchSite> sites, const std::map<pid_t, ThreadStack>& stacks,
    const std::function<Result<std::array<uint8_t, kPatchBytes>>(uint64_t)>& live);

// Whether the pad at `pad` (jit/entry_pads.h) may get the file's padding
// back now that no short jump leads to it: no thread's PC, nor any PC on
// its stack (a signal frame's), lies in its 5 bytes, its first included (a
// thread there would run nops into the next function), and every stack is
// known to its end. Else the pad stays a jmp into the cache, which stays
// mapped (I8): nothing else reaches it.
bool pad_may_go(uint64_t pad, const std::map<pid_t, ThreadStack>& stacks);

}  // namespace dyni
