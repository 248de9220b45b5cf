// A small ELF file of a cache for gdb (issue 23 item 2): one function symbol
// per copy ("NAME [dyni]", at its run-time address) and the cache's unwind
// rows (.eh_frame at the address the target has them), so that in
// `gdb -p PID`, after `add-symbol-file FILE`, `bt` names the copies and
// unwinds through them to their callers. dynid writes one per injection to
// <state_dir>/gdb/ (root's) and -status -json shows the command
// (dynimized.gdb_command). Where the original's debug info can be read
// (source_lines.h), a line table gives the copies' instructions their
// source lines. The GDB JIT interface is not used: it would write into the
// target's own data.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/debug_lines.h"
#include "dynid/injector.h"

namespace dyni {

// The ELF image: ET_EXEC for x86-64, sections .text (NOBITS: gdb reads the
// code from the process), .eh_frame, .symtab, .strtab, .shstrtab, and with
// `debug` (debug_lines.h) .debug_abbrev, .debug_info, .debug_line.
std::vector<uint8_t> cache_symbol_file(const std::vector<CopyRange>& copies, uint64_t code_addr, uint64_t code_size,
                                       uint64_t eh_frame_addr, std::span<const uint8_t> eh_frame,
                                       const DebugSections& debug = {});

// Where the symbol file of process (pid, start_time)'s cache of `tier` is.
// `module_tag`: "" for the first module's cache, "-libc.so.6" for a further one's (all_hot_modules).
std::string cache_symbol_file_path(pid_t pid, uint64_t start_time, const std::string& tier,
                                   const std::string& module_tag = "");

// Writes `in`'s symbol file for process (pid, start_time); returns the gdb
// command that loads it ("add-symbol-file PATH").
Result<std::string> save_cache_symbol_file(const Injection& in, const std::string& tier, const std::string& module_tag = "");

}  // namespace dyni
