// Section-backed reads by virtual address.
#include "jit/module_image.h"

#include <elf.h>
#include <fmt/format.h>

namespace dyni::jit {

ModuleImage::ModuleImage(const elf::ElfFile& file) {
  for (const auto& s : file.sections()) {
    if (!(s.flags & SHF_ALLOC) || s.type == SHT_NOBITS || s.size == 0) continue;
    auto bytes = file.contents(s);
    if (!bytes) continue;
    ranges_.push_back({s.addr, s.size, *bytes, (s.flags & SHF_EXECINSTR) != 0});
  }
}

void ModuleImage::add(uint64_t addr, std::span<const uint8_t> bytes, bool executable) {
  ranges_.push_back({addr, bytes.size(), bytes, executable});
}

Result<std::span<const uint8_t>> ModuleImage::read(uint64_t addr, uint64_t size) const {
  for (const Range& r : ranges_) {
    if (addr < r.addr || addr - r.addr >= r.size) continue;
    uint64_t offset = addr - r.addr;
    if (size > r.size - offset) break;
    return r.bytes.subspan(offset, size);
  }
  return fail(fmt::format("no file contents for {:#x}+{}", addr, size));
}

bool ModuleImage::is_code(uint64_t addr) const {
  for (const Range& r : ranges_)
    if (addr >= r.addr && addr - r.addr < r.size) return r.executable;
  return false;
}

}  // namespace dyni::jit
