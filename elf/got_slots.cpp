// Naming a module's GOT slots from its dynamic relocations (got_slots.h).
#include "elf/got_slots.h"

#include <elf.h>

#include <cstring>
#include <string_view>

namespace dyni::elf {

Result<std::vector<GotSlot>> got_slots(const ElfFile& file) {
  std::vector<GotSlot> out;
  const auto& sections = file.sections();
  const Section* dynsym = file.find_section(".dynsym");
  if (!dynsym) return out;
  const std::size_t dynsym_index = static_cast<std::size_t>(dynsym - sections.data());
  if (dynsym->link >= sections.size()) return fail(".dynsym names no string table");
  auto symbols = file.contents(*dynsym);
  auto names = file.contents(sections[dynsym->link]);
  if (!symbols) return std::unexpected(symbols.error());
  if (!names) return std::unexpected(names.error());
  for (const Section& rela : sections) {
    if (rela.type != SHT_RELA || rela.link != dynsym_index) continue;
    auto bytes = file.contents(rela);
    if (!bytes) return std::unexpected(bytes.error());
    for (std::size_t at = 0; at + sizeof(Elf64_Rela) <= bytes->size(); at += sizeof(Elf64_Rela)) {
      Elf64_Rela r;
      std::memcpy(&r, bytes->data() + at, sizeof r);
      const uint32_t type = ELF64_R_TYPE(r.r_info);
      const uint64_t index = ELF64_R_SYM(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      if (index == 0 || index >= symbols->size() / sizeof(Elf64_Sym)) continue;
      Elf64_Sym s;
      std::memcpy(&s, symbols->data() + index * sizeof s, sizeof s);
      if (s.st_name >= names->size()) continue;
      const char* start = reinterpret_cast<const char*>(names->data()) + s.st_name;
      std::string_view name(start, ::strnlen(start, names->size() - s.st_name));
      const bool defined = s.st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s.st_info) != STT_GNU_IFUNC;
      out.push_back({r.r_offset, std::string(name.substr(0, name.find('@'))), defined ? s.st_value : 0,
                     type == R_X86_64_JUMP_SLOT});
    }
  }
  return out;
}

}  // namespace dyni::elf
