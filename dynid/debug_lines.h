// DWARF for gdb's symbol file of a cache (gdb_symbols.h): one compile unit
// covering the copies, each copy a subprogram, and a line table that gives
// each copy's instructions the source line of the original instruction they
// stand for (source_lines.h), so that gdb's `bt` and `list` show file:line
// in dyni's copies. DWARF 4, written by hand: a writer of dyni's own data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dyni {

struct LineRow {
  uint64_t addr = 0;  // run-time, in the copy
  std::string file;
  uint32_t line = 0;
};

struct CopyLines {
  uint64_t begin = 0, end = 0;  // the copy, run-time
  std::string name;             // as gdb shows it
  std::vector<LineRow> rows;    // by address, inside [begin, end)
};

struct DebugSections {
  std::vector<uint8_t> abbrev, info, line;  // .debug_abbrev, .debug_info, .debug_line
};

// Empty sections when no copy has a row. Pure; unit-tested (read back with
// LLVM's DWARF reader).
DebugSections dwarf_for_copies(const std::vector<CopyLines>& copies);

}  // namespace dyni
