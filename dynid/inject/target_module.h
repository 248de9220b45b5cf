// The module whose hot functions are copied, as the jit and the live checks
// see it: the target's executable, or one of its shared libraries. Its file,
// its function table and unwind tables, where it is mapped, and which hot
// functions may be copied from the file (the live bytes are the file's, no
// rseq section). Read once per injection, before the target is touched.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "dynid/module_choice.h"
#include "elf/eh_frame.h"
#include "elf/elf_file.h"
#include "jit/cache_eh_frame.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {

// A PLT stub (.plt, .plt.sec, .plt.got, at the section's entry size) and
// the GOT slot its `jmp *SLOT(%rip)` reads, link-time; `direct` when only an
// endbr64 or a nop comes before that jmp (PLT0 pushes first, and mold's and
// lld's retpoline stubs load r11 first).
struct PltStub {
  uint64_t slot = 0;
  bool direct = false;
};

struct TargetModule {
  const profiler::Module* module = nullptr;  // its path, bias and function table
  std::unique_ptr<elf::ElfFile> file;
  std::unique_ptr<jit::ModuleImage> image;
  std::map<uint64_t, elf::Fde> fdes;  // by first address
  jit::UnwindSources unwind;
  uint64_t lo = 0, hi = 0;            // its mappings, run-time
  uint64_t load = 0;                  // a library's code mapping's start less its file offset (0: the executable)
  // Its PLT stubs whose GOT slot, read live, holds one of its own functions
  // (a library's calls between its exported functions): a copy calls the
  // function, or its copy, directly (link-time addresses; plt_redirects).
  std::map<uint64_t, PltStub> plt_stubs;  // by the stub's link-time address
  jit::Redirects plt;
  std::map<uint64_t, uint64_t> plt_slots;  // the slots behind `plt`, run-time: the value each held
  // Its calls that reach glibc's dlopen, dlsym... (which find the calling
  // module by the return address): their callers stay in the original code
  // (jit/return_address.h), in an executable as in a library.
  jit::CallerLookups caller_lookups;
  // The target's executable, whatever the module: a thread stopped in its
  // code may take a remote call (clean_thread.h).
  std::string executable;
  // glibc's libc: its functions that make a system call stay in place, and
  // these too, by name (module_policy.h): start → why.
  bool system_library = false;
  std::map<uint64_t, std::string> kept_in_place;
  // Only its leaf functions are copied (jit ModuleInput::only_leaves): set
  // by prepare for glibc's libc in a process with no unwinder loaded.
  bool only_leaves = false;
};

// How read_target_module says a library was unloaded, or loaded again
// elsewhere, between the symbols' read and its own (a plugin dlclosed and
// dlopened in a loop): worth reading again.
inline constexpr const char* kUnloadedWhileRead = "unloaded or loaded again while it was read";

// The module mapped from `path` (as /proc/PID/maps names it), or the
// executable when `path` is empty. A library is refused when dyni's own
// remote calls and stack proofs rely on its code staying as it is
// (why_library_stays), when it has no build-id (its record is tied to the
// module by it), or when it is mapped more than once (dlmopen).
Result<TargetModule> read_target_module(pid_t pid, const profiler::Symbolizer& symbols, const std::string& path = "");

// The module's PLT stubs (.plt, .plt.sec, .plt.got: `jmp *SLOT(%rip)`,
// after an endbr64 or nop at most) whose slot in process `pid` holds the
// start of one of the module's functions. A slot is read once: one that
// still points at the lazy resolver, or at another module (an LD_PRELOAD
// or an earlier library interposing), is left to the stub. A resolved slot
// is not written again by ld.so.
// The slots read are kept (`plt_slots`): the map window and every patch
// window read them again (slots_unchanged), so that a hook written into one
// meanwhile (a GOT hooking profiler) is not bypassed by copies patched in.
jit::Redirects plt_redirects(pid_t pid, TargetModule& module);
// Fails when a slot (run-time address → the value read) holds another value
// now, or cannot be read.
Status slots_unchanged(pid_t pid, const std::map<uint64_t, uint64_t>& slots);

// Why a library is never copied: dynid/module_choice.h why_library_stays.
using dyni::why_library_stays;

// [lowest start, highest end) of the mappings of the file at `path`.
std::pair<uint64_t, uint64_t> module_range(const std::vector<profiler::Mapping>& maps, const std::string& path);

// Before there is a cache: an exec keeps the pid and start time, but maps
// the executable afresh (elsewhere, with ASLR); a dlclose and dlopen may map
// a library elsewhere, or another file at its path.
Status module_where_it_was(pid_t pid, const TargetModule& prepared);

// The hot functions whose code in the target is still the file's: a copy is
// made from the file, so a function changed in memory (a uprobe, a
// breakpoint, another patcher) is left alone, whole. Bytes dyni wrote itself
// (`ours`: the patches of the caches the target holds, entries and call
// sites, and of the counting cache being replaced) count as the file's where
// the live bytes are still dyni's. A function whose first difference is an
// int3 is skipped as "func_X: <kBreakpointInCode> at 0xADDR".
inline constexpr uint8_t kInt3 = 0xcc;
inline constexpr const char* kBreakpointInCode =
    "an int3 the file does not have (a debugger's breakpoint or a uprobe): left in the original code";
std::vector<uint64_t> unchanged_in_memory(pid_t pid, const TargetModule& exe, const std::vector<uint64_t>& hot,
                                          std::span<const PatchRecord> ours, std::vector<std::string>& skipped);

// Hot functions that hold an rseq critical section are left alone: the
// kernel aborts a preempted section only at its original addresses, so a
// copy would run it unprotected. Sections are found by their descriptors in
// `__rseq_cs` (struct rseq_cs: version, flags, start_ip, post_commit_offset,
// abort_ip), read from the process, where they are relocated. A descriptor
// kept elsewhere is not seen (docs/injection.md).
Result<std::vector<uint64_t>> without_rseq_sections(pid_t pid, const TargetModule& exe, const std::vector<uint64_t>& hot,
                                                    std::vector<std::string>& skipped);

}  // namespace dyni::inject
