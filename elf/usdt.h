// USDT probe sites: the `.note.stapsdt` notes that sys/sdt.h's STAP_PROBE
// and DTRACE_PROBE macros leave (SystemTap's format, which bpftrace's
// `usdt:` and perf's `sdt_` events read). Each note names a probe and the
// address of its nop; a tracer attaches a uprobe there, an int3 in the
// file's page. A copy of the function in a code cache runs its own nop and
// never fires it, so the jit keeps such functions in the original code
// (jit/pipeline.h, ModuleInput::probe_sites). Untrusted input (I9): a
// malformed note is an Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace dyni::elf {

struct UsdtProbe {
  std::string provider, name;
  uint64_t pc = 0;         // the probe's nop, link-time (prelink's move undone through .stapsdt.base)
  uint64_t semaphore = 0;  // its enable counter, link-time; 0: none
};

// Every probe of `file`, in note order; none when it has no .note.stapsdt.
Result<std::vector<UsdtProbe>> usdt_probes(const ElfFile& file);

}  // namespace dyni::elf
