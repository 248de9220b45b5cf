// .eh_frame CIE/FDE walking and DW_EH_PE pointer decoding.
#include "elf/eh_frame.h"

#include <map>
#include <optional>
#include <string>

#include "elf/byte_reader.h"

namespace dyni::elf {
namespace {

constexpr uint8_t kOmit = 0xff;

struct Cie {
  uint8_t fde_encoding = 0;   // DW_EH_PE_absptr unless 'R' says otherwise
  uint8_t lsda_encoding = kOmit;
  uint64_t personality = 0;
  bool personality_indirect = false;
  bool signal_frame = false;
  bool has_augmentation_data = false;
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t return_register = 16;
  std::size_t program = 0, program_end = 0;
};

// Reads a DW_EH_PE-encoded pointer at the reader's position.
std::optional<uint64_t> read_encoded(ByteReader& r, uint8_t encoding, uint64_t section_addr,
                                     bool apply_base = true) {
  uint64_t field_addr = section_addr + r.pos();
  std::optional<uint64_t> value;
  switch (encoding & 0x0f) {
    case 0x00: value = r.read<uint64_t>(); break;
    case 0x01: value = r.uleb128(); break;
    case 0x02: if (auto v = r.read<uint16_t>()) value = *v; break;
    case 0x03: if (auto v = r.read<uint32_t>()) value = *v; break;
    case 0x04: value = r.read<uint64_t>(); break;
    case 0x09: if (auto v = r.sleb128()) value = static_cast<uint64_t>(*v); break;
    case 0x0a: if (auto v = r.read<int16_t>()) value = static_cast<uint64_t>(int64_t{*v}); break;
    case 0x0b: if (auto v = r.read<int32_t>()) value = static_cast<uint64_t>(int64_t{*v}); break;
    case 0x0c: if (auto v = r.read<int64_t>()) value = static_cast<uint64_t>(*v); break;
    default: return std::nullopt;
  }
  if (!value || !apply_base) return value;
  switch (encoding & 0x70) {
    case 0x00: return value;
    case 0x10: return *value + field_addr;  // pcrel
    default: return std::nullopt;           // textrel/datarel/funcrel: not used on x86-64 Linux
  }
}

Result<Cie> parse_cie(ByteReader r, uint64_t section_addr) {
  Cie cie;
  auto version = r.read<uint8_t>();
  auto augmentation = r.cstring();
  if (!version || (*version != 1 && *version != 3) || !augmentation)
    return fail("bad CIE header");
  if (augmentation->find("eh") != std::string::npos && !r.skip(8)) return fail("bad CIE eh data");
  auto code_align = r.uleb128();
  auto data_align = r.sleb128();
  if (!code_align || !data_align) return fail("bad CIE alignment factors");
  cie.code_align = *code_align;
  cie.data_align = *data_align;
  std::optional<uint64_t> ra;
  if (*version == 1) {
    if (auto b = r.read<uint8_t>()) ra = *b;
  } else {
    ra = r.uleb128();
  }
  if (!ra) return fail("bad CIE return register");
  cie.return_register = *ra;
  cie.program_end = r.size();
  if (augmentation->empty() || (*augmentation)[0] != 'z') {
    cie.program = r.pos();
    return cie;
  }
  cie.has_augmentation_data = true;
  auto aug_length = r.uleb128();
  if (!aug_length) return fail("bad CIE augmentation length");
  std::size_t aug_end = r.pos() + *aug_length;
  if (*aug_length > r.size() - r.pos()) return fail("bad CIE augmentation length");
  for (char c : augmentation->substr(1)) {
    if (c == 'R') {
      auto enc = r.read<uint8_t>();
      if (!enc) return fail("bad CIE FDE encoding");
      cie.fde_encoding = *enc;
    } else if (c == 'L') {
      auto enc = r.read<uint8_t>();
      if (!enc) return fail("bad CIE LSDA encoding");
      cie.lsda_encoding = *enc;
    } else if (c == 'P') {
      auto enc = r.read<uint8_t>();
      auto personality = enc ? read_encoded(r, *enc & 0x7f, section_addr) : std::nullopt;
      if (!personality) return fail("bad CIE personality");
      cie.personality = *personality;
      cie.personality_indirect = (*enc & 0x80) != 0;
    } else if (c == 'S') {
      cie.signal_frame = true;
    } else if (c != 'B') {
      return fail(std::string("unknown CIE augmentation '") + c + "'");
    }
  }
  cie.program = aug_end;
  return cie;
}

Result<Fde> parse_fde(ByteReader r, const Cie& cie, uint64_t section_addr) {
  Fde fde;
  auto begin = read_encoded(r, cie.fde_encoding, section_addr);
  auto range = read_encoded(r, cie.fde_encoding & 0x0f, section_addr, false);
  if (!begin || !range) return fail("bad FDE address range");
  fde.begin = *begin;
  fde.end = *begin + *range;
  if (fde.end < fde.begin) return fail("FDE range wraps around");
  fde.program = r.pos();
  if (cie.has_augmentation_data) {
    auto len = r.uleb128();
    if (!len || *len > r.size() - r.pos()) return fail("bad FDE augmentation length");
    fde.program = r.pos() + *len;
    if (cie.lsda_encoding != kOmit && *len > 0) {
      auto lsda = read_encoded(r, cie.lsda_encoding, section_addr);
      if (!lsda) return fail("bad FDE LSDA pointer");
      fde.lsda = *lsda;
    }
  }
  fde.program_size = r.size() - fde.program;
  fde.code_align = cie.code_align;
  fde.data_align = cie.data_align;
  fde.return_register = cie.return_register;
  fde.personality = cie.personality;
  fde.personality_indirect = cie.personality_indirect;
  fde.signal_frame = cie.signal_frame;
  fde.cie_program = cie.program;
  fde.cie_program_size = cie.program_end - cie.program;
  return fde;
}

}  // namespace

Result<std::vector<Fde>> parse_eh_frame(std::span<const uint8_t> bytes, uint64_t section_addr) {
  std::vector<Fde> fdes;
  std::map<std::size_t, Cie> cies;
  ByteReader r(bytes);
  while (r.pos() < bytes.size()) {
    std::size_t start = r.pos();
    auto length32 = r.read<uint32_t>();
    if (!length32) return fail(".eh_frame: truncated record length");
    if (*length32 == 0) break;  // terminator
    uint64_t length = *length32;
    if (*length32 == 0xffffffff) {
      auto length64 = r.read<uint64_t>();
      if (!length64) return fail(".eh_frame: truncated extended length");
      length = *length64;
    }
    std::size_t id_pos = r.pos();
    if (length > bytes.size() - id_pos) return fail(".eh_frame: record runs past the section");
    if (length < 4) return fail(".eh_frame: record too short for its id");
    std::size_t next = id_pos + static_cast<std::size_t>(length);
    auto id = r.read<uint32_t>();
    if (!id) return fail(".eh_frame: truncated record id");
    ByteReader body(bytes.first(next), r.pos());
    if (*id == 0) {
      auto cie = parse_cie(body, section_addr);
      if (!cie) return fail(".eh_frame CIE at " + std::to_string(start) + ": " + cie.error().message());
      cies[start] = *cie;
    } else {
      if (*id > id_pos) return fail(".eh_frame: FDE points before the section");
      std::size_t cie_pos = id_pos - *id;
      auto cie = cies.find(cie_pos);
      if (cie == cies.end()) {
        // A CIE after its FDE is legal but unusual; parse it where it is.
        ByteReader at(bytes, cie_pos);
        auto len = at.read<uint32_t>();
        auto cid = at.read<uint32_t>();
        if (!len || !cid || *cid != 0 || *len == 0xffffffff || *len > bytes.size() - cie_pos - 4)
          return fail(".eh_frame: FDE at " + std::to_string(start) + " has no valid CIE");
        auto parsed = parse_cie(ByteReader(bytes.first(cie_pos + 4 + *len), at.pos()), section_addr);
        if (!parsed) return std::unexpected(parsed.error());
        cie = cies.emplace(cie_pos, *parsed).first;
      }
      auto fde = parse_fde(body, cie->second, section_addr);
      if (!fde) return fail(".eh_frame FDE at " + std::to_string(start) + ": " + fde.error().message());
      fde->offset = start;
      fde->cie_offset = cie_pos;
      if (fde->end > fde->begin) fdes.push_back(*fde);
    }
    r.seek(next);
  }
  return fdes;
}

}  // namespace dyni::elf
