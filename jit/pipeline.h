// The jit for one module, top to bottom (DESIGN.md §3, steps 4–6). Pure: it
// reads the module's bytes, never a process.
//
//   1. analyse   each hot function: decode, CFG, jump tables (cfg.h), or
//                reject it with a typed reason (I5); reject the callers of
//                functions that use their return address (return_address.h);
//                leave unpatched the entries other code branches into
//                (entry_branches.h)
//   2. lay out   its blocks by exact counts from a counting cache where there
//                are any (module_counts.h), else by the profile's samples
//                (block_layout.h)
//   3. order     the functions by call-graph affinity: counted calls, else
//                sampled ones (function_order.h)
//   4. emit      the code cache: relocate, send calls between hot functions
//                and through PLT stubs straight to their targets, promote
//                indirect calls whose counts show one target (promotion.h), verify;
//                a copy that fails is rejected, never the module
//                (code_cache.h, emitter.h, verifier.h)
//   5. plan      the entry patches, all or nothing per function (patch_plan.h)
//   6. unwind    rows for every copy: each cache instruction has its
//                original's frame (unwind_rows.h, elf/cfi.h)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/cfi.h"
#include "elf/function_table.h"
#include "jit/block_layout.h"
#include "jit/code_cache.h"
#include "jit/module_counts.h"
#include "jit/module_image.h"
#include "jit/module_profile.h"
#include "jit/return_address.h"

namespace dyni::jit {

struct JitOptions {
  LayoutOptions layout;
  CacheOptions cache;  // code_cache.h
  // Copy functions that hold a USDT probe site anyway (ModuleInput::probe_sites):
  // a tracer's probe there then fires only for calls that run the original.
  bool copy_probe_functions = false;
};

struct Rejection {
  uint64_t addr = 0;
  std::string name;    // for people: demangled, or func_<hex>
  std::string reason;  // "indirect jump unresolved at 0x…"
  uint64_t samples = 0;
};

struct ModulePlan {
  CodeCache cache;
  std::vector<std::unique_ptr<FunctionCfg>> cfgs;  // of the functions in the cache
  std::map<uint64_t, std::vector<elf::CfiRow>> original_unwind;  // by function start, where it has an FDE
  std::set<uint64_t> shares_entry_bytes;  // functions with another entry point where their patch would go
  std::vector<Rejection> rejected;  // by analysis, or by the cache (copy not emitted or not verified)
  uint64_t hot_samples = 0, accepted_samples = 0;  // of the hot functions asked for
  std::size_t blocks = 0, blocks_left = 0;         // in the cache's functions; left in the original code
};

struct ModuleInput {
  const elf::FunctionTable* functions = nullptr;
  const ModuleImage* image = nullptr;
  const ModuleProfile* profile = nullptr;  // null: no samples, original block order
  std::vector<uint64_t> hot;               // function start addresses, any order
  uint64_t cache_base = 0;
  Redirects plt;                           // PLT stub → the function it reaches
  std::span<const uint8_t> eh_frame;       // the module's .eh_frame (empty: no unwind rows)
  uint64_t eh_frame_addr = 0;
  // Exact counts from a counting cache (module_counts.h): blocks and
  // functions are laid out by them where they have any, over the profile.
  const ModuleCounts* counts = nullptr;
  // USDT probe sites (elf/usdt.h): probe nop → "provider:name". A function
  // holding one stays in the original code, where a tracer's uprobe fires
  // (unless JitOptions::copy_probe_functions).
  std::map<uint64_t, std::string> probe_sites = {};
  // The calls that reach glibc's caller lookups (return_address.h): their
  // callers stay in the original code.
  CallerLookups caller_lookups = {};
  // Functions that stay in the original code whatever their heat, by the
  // caller's policy: start → why (dynid's module_policy.h: in glibc's libc,
  // the allocator and the other functions dyni's remote calls may meet).
  std::map<uint64_t, std::string> kept_in_place = {};
  // Every function that makes a system call (syscall, sysenter, int) stays
  // in the original code too: in libc, dyni's remote system calls run its
  // `syscall; ret`, gdb and the unwinders know __restore_rt by its bytes,
  // the stack reader matches clone's, and a thread cancelled in a system
  // call unwinds from there.
  bool keep_system_call_functions = false;
  // Only functions that call no other (leaves; a tail jump is no call) may be
  // copied: a module whose copies' frames no unwinder will know (no
  // libgcc_s loaded) and whose functions have landing pads (libc's cleanups
  // under thread cancellation) — a cancelled thread's unwinding stops at a
  // copy's frame, skipping the landing pads above it, and a leaf's copy is
  // never below another frame at a cancellation point.
  bool only_leaves = false;
  // The file has __patchable_function_entries (-fpatchable-function-entry):
  // nops before functions that a live patcher (libpulp) may write. No pads
  // there (entry_pads.h).
  bool patchable_function_entries = false;
};

// A cache address for planning, in the module's link-time numbering: 256 MiB
// past its last function, page-aligned, well within ±2 GB of all its code.
// Injection picks the real address near the loaded module and re-emits (~0.1 s).
uint64_t provisional_cache_base(const elf::FunctionTable& functions);

// Points `input` at `file`'s .eh_frame (its functions' unwind rows).
void use_unwind_info(ModuleInput& input, const elf::ElfFile& file);
// The reason_kind of a function kept out for its USDT probe site.
inline constexpr char kHoldsProbeSite[] = "holds a USDT probe site";
// The reason_kinds of functions kept out by ModuleInput::kept_in_place and
// keep_system_call_functions.
inline constexpr char kKeptInPlace[] = "kept in place";
inline constexpr char kMakesSystemCall[] = "makes a system call";
// The reason_kind of a function kept out by ModuleInput::only_leaves.
inline constexpr char kNotALeaf[] = "calls another function";
// Gives `input` `file`'s USDT probe sites; fails when its notes are malformed
// (then where the probes are is unknown: plan nothing from that file).
Status use_probe_sites(ModuleInput& input, const elf::ElfFile& file);

Result<ModulePlan> optimize_module(const ModuleInput& input, const JitOptions& options = {});

}  // namespace dyni::jit
