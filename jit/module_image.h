// A module's loaded contents by link-time address, read from its ELF
// sections: what jit/ reads code and jump tables from. Pure data, no process.
#pragma once

#include <cstdint>
#include <span>
#include <string>
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
  void add(uint64_t addr, std::span<const uint8_t> bytes, bool executable);

  // `size` bytes at `addr`, all inside one section with file contents.
  Result<std::span<const uint8_t>> read(uint64_t addr, uint64_t size) const;
  // True when `addr` lies in an executable section.
  bool is_code(uint64_t addr) const;

 private:
  struct Range {
    uint64_t addr, size;
    std::span<const uint8_t> bytes;
    bool executable;
  };
  std::vector<Range> ranges_;
};

}  // namespace dyni::jit
