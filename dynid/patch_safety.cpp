// The live checks before an entry patch is written.
#include "dynid/patch_safety.h"

#include <algorithm>

#include <fmt/format.h>

namespace dyni {
namespace {

struct ThreadPc {
  pid_t tid;
  uint64_t pc;
};

// Every PC a thread may resume at: its own, and each one on its stack.
std::vector<ThreadPc> all_pcs(const std::map<pid_t, ThreadStack>& stacks) {
  std::vector<ThreadPc> pcs;
  for (const auto& [tid, stack] : stacks)
    for (const StackFrame& f : stack.frames) pcs.push_back({tid, f.pc});
  std::sort(pcs.begin(), pcs.end(), [](const ThreadPc& a, const ThreadPc& b) { return a.pc < b.pc; });
  return pcs;
}

// The first thread with a PC strictly inside (addr, addr + length), or null.
const ThreadPc* inside(const std::vector<ThreadPc>& pcs, uint64_t addr, std::size_t length) {
  auto it = std::upper_bound(pcs.begin(), pcs.end(), addr, [](uint64_t a, const ThreadPc& p) { return a < p.pc; });
  return it != pcs.end() && it->pc < addr + length ? &*it : nullptr;
}

std::string unknown_stack(const std::map<pid_t, ThreadStack>& stacks) {
  for (const auto& [tid, stack] : stacks)
    if (!stack.complete) return fmt::format("thread {}'s stack is not known to its end: {}", tid, stack.incomplete_why);
  return "";
}

}  // namespace

bool pad_may_go(uint64_t pad, const std::map<pid_t, ThreadStack>& stacks) {
  if (!unknown_stack(stacks).empty()) return false;
  for (const auto& [tid, stack] : stacks)
    for (const StackFrame& f : stack.frames)
      if (f.pc >= pad && f.pc < pad + kPatchBytes) return false;
  return true;
}

std::vector<SiteCheck> check_patch_sites(
    std::span<const PatchSite> sites, const std::map<pid_t, ThreadStack>& stacks,
    const std::function<Result<std::array<uint8_t, kPatchBytes>>(uint64_t)>& live) {
  std::vector<ThreadPc> pcs = all_pcs(stacks);
  std::string unknown = unknown_stack(stacks);
  std::vector<SiteCheck> checks;
  for (const PatchSite& site : sites) {
    auto bytes = live(site.addr);
    if (!bytes) {
      checks.push_back({SiteVerdict::Wait, "live bytes unreadable: " + bytes.error().message()});
    } else if (*bytes != site.original) {
      checks.push_back({SiteVerdict::LeaveAlone,
                        fmt::format("live bytes at {:#x} differ from the file's (a breakpoint, uprobe or other patch)",
                                    site.addr)});
    } else if (const ThreadPc* t = inside(pcs, site.addr, site.changed)) {
      checks.push_back({SiteVerdict::Wait, fmt::format("thread {} is at {:#x}, inside the entry bytes", t->tid, t->pc)});
    } else if (!unknown.empty()) {
      checks.push_back({SiteVerdict::Wait, unknown});
    } else {
      checks.push_back({SiteVerdict::Patch, ""});
    }
  }
  return checks;
}

}  // namespace dyni
