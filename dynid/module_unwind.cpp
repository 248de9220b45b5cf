// The .eh_frame_hdr tables of a process's ELF objects, from its memory.
#include "dynid/module_unwind.h"

#include <elf.h>

#include <cstring>
#include <optional>

namespace dyni {
namespace {

constexpr uint8_t kPcrelSdata4 = 0x1b;   // DW_EH_PE_pcrel | DW_EH_PE_sdata4
constexpr uint8_t kUdata4 = 0x03;        // DW_EH_PE_udata4
constexpr uint8_t kDatarelSdata4 = 0x3b; // DW_EH_PE_datarel | DW_EH_PE_sdata4: what libunwind searches
constexpr std::size_t kMaxPhdrs = 128;

template <class T>
std::optional<T> read_as(WindowMemory& memory, uint64_t addr) {
  auto bytes = memory.read(addr, sizeof(T));
  if (!bytes) return std::nullopt;
  T value;
  std::memcpy(&value, bytes->data(), sizeof(T));
  return value;
}

struct ObjectRange {
  uint64_t lo = 0, hi = 0;
  bool has_code = false;
};

// The mappings of the object whose ELF header is mapped at maps[first]:
// that one and those after it with the same path, up to the next header.
ObjectRange object_range(const std::vector<profiler::Mapping>& maps, std::size_t first) {
  ObjectRange r{maps[first].start, maps[first].end, maps[first].executable};
  for (std::size_t i = first + 1; i < maps.size() && maps[i].path == maps[first].path && maps[i].offset != 0; ++i)
    r.hi = maps[i].end, r.has_code = r.has_code || maps[i].executable;
  return r;
}

std::optional<UnwindTable> table_of(WindowMemory& memory, uint64_t lo, uint64_t hi) {
  auto eh = read_as<Elf64_Ehdr>(memory, lo);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum > kMaxPhdrs || eh->e_phoff > hi - lo)
    return std::nullopt;
  std::optional<uint64_t> first_load, hdr_vaddr;
  for (uint16_t i = 0; i < eh->e_phnum; ++i) {
    auto ph = read_as<Elf64_Phdr>(memory, lo + eh->e_phoff + uint64_t{i} * sizeof(Elf64_Phdr));
    if (!ph) return std::nullopt;
    if (ph->p_type == PT_LOAD && !first_load) first_load = ph->p_vaddr & ~uint64_t{0xfff};
    if (ph->p_type == PT_GNU_EH_FRAME) hdr_vaddr = ph->p_vaddr;
  }
  if (!first_load || !hdr_vaddr || *hdr_vaddr < *first_load) return std::nullopt;
  const uint64_t hdr = lo + (*hdr_vaddr - *first_load);  // the first PT_LOAD is mapped at lo
  if (hdr < lo || hdr + 12 > hi) return std::nullopt;
  auto head = memory.read(hdr, 12);
  if (!head) return std::nullopt;
  const std::vector<uint8_t>& h = *head;
  if (h[0] != 1 || h[1] != kPcrelSdata4 || h[2] != kUdata4 || h[3] != kDatarelSdata4) return std::nullopt;
  uint32_t count = 0;
  std::memcpy(&count, h.data() + 8, 4);
  if (count == 0 || uint64_t{count} * 8 > hi - (hdr + 12)) return std::nullopt;
  return UnwindTable{lo, hi, hdr + 12, count, hdr};
}

}  // namespace

std::vector<UnwindTable> module_unwind_tables(const std::vector<profiler::Mapping>& maps, WindowMemory& memory) {
  std::vector<UnwindTable> out;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const profiler::Mapping& m = maps[i];
    bool object = m.offset == 0 && m.readable && (m.file_backed() || m.path == "[vdso]");
    if (!object) continue;
    // Only objects with code: a data file the target maps is never read
    // (a read would page it in, and block the window on its storage).
    ObjectRange r = object_range(maps, i);
    if (!r.has_code) continue;
    if (auto t = table_of(memory, r.lo, r.hi)) out.push_back(*t);
  }
  return out;
}

}  // namespace dyni
