// Section-backed reads by virtual address.
#include "jit/module_image.h"

#include <elf.h>
#include <fmt/format.h>

#include <cstring>

namespace dyni::jit {

ModuleImage::ModuleImage(const elf::ElfFile& file) {
  for (const auto& s : file.sections()) {
    if (!(s.flags & SHF_ALLOC) || s.type == SHT_NOBITS || s.size == 0) continue;
    auto bytes = file.contents(s);
    if (!bytes) continue;
    ranges_.push_back({s.addr, s.size, *bytes, (s.flags & SHF_EXECINSTR) != 0, (s.flags & SHF_WRITE) != 0});
  }
  for (const auto& seg : file.segments())
    if (seg.type == PT_GNU_RELRO) relro_.push_back({seg.vaddr, seg.vaddr + seg.memsz});
  fixed_address_ = file.type() == ET_EXEC;
  if (!fixed_address_) read_relocations(file);
}

// The dynamic relocations that put addresses into the module's data. Both
// tables are untrusted: a malformed one is read as far as it is whole.
void ModuleImage::read_relocations(const elf::ElfFile& file) {
  for (const auto& s : file.sections()) {
    auto bytes = s.type == SHT_RELA || s.type == SHT_RELR ? file.contents(s) : fail("");
    if (!bytes) continue;
    if (s.type == SHT_RELA) {
      for (std::size_t at = 0; at + sizeof(Elf64_Rela) <= bytes->size(); at += sizeof(Elf64_Rela)) {
        Elf64_Rela r;
        std::memcpy(&r, bytes->data() + at, sizeof r);
        if (ELF64_R_TYPE(r.r_info) == R_X86_64_RELATIVE) relative_[r.r_offset] = static_cast<uint64_t>(r.r_addend);
        else relocated_otherwise_.insert(r.r_offset);
      }
      continue;
    }
    // RELR: an address entry relocates its slot; a bitmap entry (low bit
    // set) relocates the slots its bits name, 63 at a time after the last.
    uint64_t next = 0;
    for (std::size_t at = 0; at + 8 <= bytes->size(); at += 8) {
      uint64_t e;
      std::memcpy(&e, bytes->data() + at, 8);
      if (!(e & 1)) {
        auto slot = read(e, 8);
        if (slot) std::memcpy(&relative_[e], slot->data(), 8);
        next = e + 8;
        continue;
      }
      for (unsigned bit = 1; bit < 64; ++bit) {
        uint64_t a = next + 8 * (bit - 1);
        if (!((e >> bit) & 1)) continue;
        if (auto slot = read(a, 8)) std::memcpy(&relative_[a], slot->data(), 8);
      }
      next += 8 * 63;
    }
  }
}

void ModuleImage::add_relative_relocation(uint64_t slot, uint64_t addend) {
  fixed_address_ = false;
  relative_[slot] = addend;
}

Result<uint64_t> ModuleImage::read_address(uint64_t slot) const {
  if (!fixed_address_) {
    auto it = relative_.find(slot);
    if (it != relative_.end() && !relocated_otherwise_.count(slot)) return it->second;
    return fail(fmt::format("no relative relocation for the address at {:#x}", slot));
  }
  auto bytes = read(slot, 8);
  if (!bytes) return std::unexpected(bytes.error());
  uint64_t value;
  std::memcpy(&value, bytes->data(), 8);
  return value;
}

void ModuleImage::add(uint64_t addr, std::span<const uint8_t> bytes, bool executable, bool writable) {
  ranges_.push_back({addr, bytes.size(), bytes, executable, writable});
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

bool ModuleImage::is_read_only(uint64_t addr, uint64_t size) const {
  for (const auto& [start, end] : relro_)
    if (addr >= start && addr <= end && size <= end - addr) return true;
  for (const Range& r : ranges_)
    if (addr >= r.addr && addr - r.addr < r.size) return !r.writable && size <= r.size - (addr - r.addr);
  return false;
}

bool ModuleImage::is_code(uint64_t addr) const {
  for (const Range& r : ranges_)
    if (addr >= r.addr && addr - r.addr < r.size) return r.executable;
  return false;
}

}  // namespace dyni::jit
