// The target's executable as the jit and the live checks see it: its file,
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
#include <utility>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "elf/eh_frame.h"
#include "elf/elf_file.h"
#include "jit/cache_eh_frame.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {

struct Executable {
  const profiler::Module* module = nullptr;
  std::unique_ptr<elf::ElfFile> file;
  std::unique_ptr<jit::ModuleImage> image;
  std::map<uint64_t, elf::Fde> fdes;  // by first address
  jit::UnwindSources unwind;
  uint64_t lo = 0, hi = 0;            // its mappings, run-time
};

Result<Executable> read_executable(pid_t pid, const profiler::Symbolizer& symbols);

// [lowest start, highest end) of the mappings of the file at `path`.
std::pair<uint64_t, uint64_t> module_range(const std::vector<profiler::Mapping>& maps, const std::string& path);

// Before there is a cache: an exec keeps the pid and start time, but maps
// the executable afresh (elsewhere, with ASLR).
Status executable_where_it_was(pid_t pid, const Executable& prepared);

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
std::vector<uint64_t> unchanged_in_memory(pid_t pid, const Executable& exe, const std::vector<uint64_t>& hot,
                                          std::span<const PatchRecord> ours, std::vector<std::string>& skipped);

// Hot functions that hold an rseq critical section are left alone: the
// kernel aborts a preempted section only at its original addresses, so a
// copy would run it unprotected. Sections are found by their descriptors in
// `__rseq_cs` (struct rseq_cs: version, flags, start_ip, post_commit_offset,
// abort_ip), read from the process, where they are relocated. A descriptor
// kept elsewhere is not seen (docs/injection.md).
Result<std::vector<uint64_t>> without_rseq_sections(pid_t pid, const Executable& exe, const std::vector<uint64_t>& hot,
                                                    std::vector<std::string>& skipped);

}  // namespace dyni::inject
