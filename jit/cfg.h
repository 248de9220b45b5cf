// The control-flow graph of one function: its instructions, basic blocks,
// successors and resolved jump tables. Built only when the whole function is
// understood (I5); otherwise the reason comes back as an Error whose text
// starts with a stable kind ("indirect jump unresolved", "data in code", ...).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.h"
#include "elf/function_table.h"
#include "jit/instruction.h"
#include "jit/module_image.h"

namespace dyni::jit {

struct JumpTable {
  uint64_t jump_addr = 0;   // the indirect jmp using it
  uint64_t table_addr = 0;  // where the entries are
  unsigned entry_size = 0;  // 4 (PIC: int32 relative to the table) or 8 (absolute, link-time)
  std::vector<uint64_t> targets;
  uint64_t load_addr = 0;   // the instruction that reads an entry (the jmp itself for jmp [mem])
  // The bound is proven by the register dataflow (register_facts.h): no
  // execution of the load reads past `targets`' entries.
  bool proven = false;
  // The copy may read a table of its own (emitter.h), with entries that
  // point at the copies: proven, and nothing but the jump uses the entry it
  // loads (cfg.cpp, rebuildable).
  bool rebuildable = false;
};

struct Block {
  uint64_t start = 0, end = 0;      // [start, end)
  std::size_t first = 0, count = 0; // instruction indices
  std::vector<uint64_t> successors; // in-function block starts
  bool exits = false;               // leaves the function (ret, tail call, stop)
};

// 5 bytes of padding between functions that this function's entry may
// jump through (jit/entry_pads.h); addr 0: none.
struct EntryPad {
  uint64_t addr = 0;
  std::array<uint8_t, 5> original{};  // the file's: nops and int3s
};

struct FunctionCfg {
  uint64_t start = 0, end = 0;
  std::vector<Instruction> instructions;
  std::vector<Block> blocks;  // in address order
  std::vector<JumpTable> tables;
  // Set by the pipeline (EntryPads::pad_for), used by entry_spot: every
  // caller of entry_spot then sees the same spot.
  EntryPad entry_pad;

  const Block* block_at(uint64_t addr) const;
};

// Decodes and analyses `function` of `image`.
Result<FunctionCfg> build_cfg(const elf::Function& function, const ModuleImage& image);

// A rejection's stable kind: its text up to " at 0x" or ": ".
// "indirect jump unresolved at 0x1234" → "indirect jump unresolved";
// "copy fails verification: verifier: …" → "copy fails verification".
std::string reason_kind(const std::string& message);

}  // namespace dyni::jit
