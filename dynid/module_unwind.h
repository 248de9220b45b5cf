// The unwind tables of the ELF objects mapped in a process (executable,
// libraries, vDSO), found in the process's own memory: each object's
// PT_GNU_EH_FRAME segment, i.e. its .eh_frame_hdr binary-search table.
// StackReader looks frames up there instead of through libunwind-ptrace's
// _UPT_find_proc_info, which reads /proc/PID/maps and maps the object's file
// again whenever consecutive frames lie in different objects (100 threads:
// 55-75 ms of a 60-80 ms unwind), and which cannot open deleted files.
#pragma once

#include <vector>

#include "dynid/target_memory.h"
#include "dynid/thread_unwind.h"
#include "profiler/process_maps.h"

namespace dyni {

// One table per object whose header, program headers and .eh_frame_hdr can
// be read and are in the usual form (table of sdata4 pairs, datarel); other
// objects are left out (libunwind-ptrace then finds their frames itself).
// The memory is untrusted (I9): every count and address is bounded by the
// object's mappings.
std::vector<UnwindTable> module_unwind_tables(const std::vector<profiler::Mapping>& maps, WindowMemory& memory);

}  // namespace dyni
