// A module's loaded contents by link-time address, read from its ELF
// sections: what jit/ reads code and jump tables from. Pure data, no process.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace dyni::jit {

class ModuleImage {
 public:
  // Keeps a reference to `file`, which must outlive the image.
  explicit ModuleImage(const elf::ElfFile& file);
  ModuleImage() = default;
  // Adds bytes that load at `addr` (tests build images from plain buffers).
  void add(uint64_t addr, std::span<const uint8_t> bytes, bool executable, bool writable = false);

  // `size` bytes at `addr`, all inside one section with file contents.
  Result<std::span<const uint8_t>> read(uint64_t addr, uint64_t size) const;
  // True when `addr` lies in an executable section.
  bool is_code(uint64_t addr) const;
  // True when [addr, addr+size) is data no store can change once the module
  // is loaded: a section without SHF_WRITE, or in PT_GNU_RELRO (read-only
  // after relocation, .data.rel.ro). A table elsewhere may be rewritten at
  // run time, so the file's entries are not the process's.
  bool is_read_only(uint64_t addr, uint64_t size) const;

  // The address an 8-byte slot holds once the module is loaded, in link-time
  // numbering: in a position-dependent executable the file's bytes; in a PIE
  // or library the addend of the slot's R_X86_64_RELATIVE relocation (RELA,
  // or RELR whose addend is the file's bytes). Fails for a slot that the
  // loader fills otherwise (a symbol's address) or not at all (in a PIE, a
  // code address the loader does not relocate is no code address at run time).
  Result<uint64_t> read_address(uint64_t slot) const;
  // Whether the module always loads at its link-time addresses (ET_EXEC):
  // only there may code hold absolute addresses of the module in its bytes.
  bool fixed_address() const { return fixed_address_; }

  // Tests: a position-independent image, with a RELATIVE relocation of
  // `addend` at `slot`.
  void make_position_independent() { fixed_address_ = false; }
  void add_relative_relocation(uint64_t slot, uint64_t addend);

 private:
  void read_relocations(const elf::ElfFile& file);

  struct Range {
    uint64_t addr, size;
    std::span<const uint8_t> bytes;
    bool executable;
    bool writable = false;
  };
  std::vector<Range> ranges_;
  std::vector<std::pair<uint64_t, uint64_t>> relro_;  // [start, end) of PT_GNU_RELRO
  bool fixed_address_ = true;
  std::unordered_map<uint64_t, uint64_t> relative_;  // slot → link-time address (RELATIVE)
  std::unordered_set<uint64_t> relocated_otherwise_;  // slots the loader fills with other values
};

}  // namespace dyni::jit
