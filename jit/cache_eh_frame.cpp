// .eh_frame (CIEs, FDEs, translated LSDAs) for a code cache.
#include "jit/cache_eh_frame.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "jit/byte_writer.h"
#include "jit/lsda.h"
#include "jit/patch_plan.h"

namespace dyni::jit {
namespace {

using Kind = elf::RegisterRule::Kind;

// DWARF call-frame instructions used here.
enum : uint8_t {
  kAdvanceLoc4 = 0x04, kUndefined = 0x07, kSameValue = 0x08, kRegister = 0x09, kDefCfa = 0x0c,
  kDefCfaExpression = 0x0f, kExpression = 0x10, kOffsetExtendedSf = 0x11, kDefCfaSf = 0x12,
  kValOffsetSf = 0x15, kValExpression = 0x16, kRestore = 0xc0, kNop = 0x00,
};
constexpr uint8_t kAbsptr = 0x00, kIndirect = 0x80;

template <typename T>
void put_at(std::vector<uint8_t>& out, std::size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

// Pads a record (from its length field at `start`) to 8 bytes and sets its length.
void close_record(std::vector<uint8_t>& out, std::size_t start) {
  while ((out.size() - start) % 8 != 0) out.push_back(kNop);
  put_at<uint32_t>(out, start, static_cast<uint32_t>(out.size() - start - 4));
}

Status put_block(std::vector<uint8_t>& out, std::span<const uint8_t> eh_frame, std::size_t at, std::size_t size) {
  if (at > eh_frame.size() || size > eh_frame.size() - at) return fail("CFI expression outside .eh_frame");
  put_uleb(out, size);
  out.insert(out.end(), eh_frame.begin() + static_cast<std::ptrdiff_t>(at),
             eh_frame.begin() + static_cast<std::ptrdiff_t>(at + size));
  return ok();
}

Status put_cfa(std::vector<uint8_t>& out, const elf::CfaRule& cfa, std::span<const uint8_t> eh_frame) {
  if (cfa.expression) {
    out.push_back(kDefCfaExpression);
    return put_block(out, eh_frame, cfa.expr_offset, cfa.expr_size);
  }
  out.push_back(kDefCfaSf);  // data alignment 1: the offset as it is
  put_uleb(out, cfa.reg);
  put_sleb(out, cfa.offset);
  return ok();
}

Status put_register(std::vector<uint8_t>& out, uint32_t reg, const elf::RegisterRule& rule,
                    std::span<const uint8_t> eh_frame) {
  switch (rule.kind) {
    case Kind::Unspecified: out.push_back(static_cast<uint8_t>(kRestore | reg)); return ok();  // the CIE has no rules
    case Kind::Undefined: out.push_back(kUndefined); put_uleb(out, reg); return ok();
    case Kind::Same: out.push_back(kSameValue); put_uleb(out, reg); return ok();
    case Kind::AtCfa: out.push_back(kOffsetExtendedSf); break;
    case Kind::ValCfa: out.push_back(kValOffsetSf); break;
    case Kind::InRegister:
      out.push_back(kRegister);
      put_uleb(out, reg);
      put_uleb(out, static_cast<uint64_t>(rule.value));
      return ok();
    case Kind::Expression:
    case Kind::ValExpression:
      out.push_back(rule.kind == Kind::Expression ? kExpression : kValExpression);
      put_uleb(out, reg);
      return put_block(out, eh_frame, rule.expr_offset, rule.expr_size);
  }
  put_uleb(out, reg);
  put_sleb(out, rule.value);
  return ok();
}

// The CFA program: each row's changes from the one before.
Status put_program(std::vector<uint8_t>& out, const CopyFrames& copy, std::span<const uint8_t> eh_frame) {
  elf::CfiState state;  // as the CIE leaves it: nothing known
  state.cfa.reg = ~0u;
  uint64_t at = copy.code->base;
  for (const UnwindRow& row : *copy.rows) {
    if (row.cache_addr < at) return fail("unwind rows out of order");
    if (row.cache_addr > at) {
      out.push_back(kAdvanceLoc4);
      put<uint32_t>(out, static_cast<uint32_t>(row.cache_addr - at));
      at = row.cache_addr;
    }
    if (!(row.state.cfa == state.cfa))
      if (auto s = put_cfa(out, row.state.cfa, eh_frame); !s) return s;
    for (uint32_t r = 0; r < elf::kCfiRegisters; ++r)
      if (!(row.state.regs[r] == state.regs[r]))
        if (auto s = put_register(out, r, row.state.regs[r], eh_frame); !s) return s;
    state = row.state;
  }
  return ok();
}

// What a CIE carries: the personality (run-time), whether it is indirect,
// and 'S'.
using CieKey = std::tuple<uint64_t, bool, bool>;

CieKey cie_key(const elf::Fde& fde, uint64_t bias) {
  return {fde.personality ? fde.personality + bias : 0, fde.personality_indirect, fde.signal_frame};
}

std::size_t put_cie(std::vector<uint8_t>& out, const CieKey& key) {
  auto [personality, indirect, signal] = key;
  std::size_t start = out.size();
  put<uint32_t>(out, 0);  // length, set by close_record
  put<uint32_t>(out, 0);  // CIE id
  out.push_back(1);       // version
  std::string augmentation = personality ? "zPLR" : "zR";
  if (signal) augmentation += 'S';
  out.insert(out.end(), augmentation.begin(), augmentation.end());
  out.push_back(0);
  put_uleb(out, 1);   // code alignment
  put_sleb(out, 1);   // data alignment
  out.push_back(16);  // return address: r16
  std::vector<uint8_t> data;
  if (personality) {
    data.push_back(indirect ? kIndirect : kAbsptr);
    put<uint64_t>(data, personality);
    data.push_back(kAbsptr);  // LSDA pointers
  }
  data.push_back(kAbsptr);  // FDE pointers
  put_uleb(out, data.size());
  out.insert(out.end(), data.begin(), data.end());
  close_record(out, start);
  return start;
}

// The copy's LSDA, or empty when the original has none.
Result<std::vector<uint8_t>> copy_lsda(const CopyFrames& copy, const UnwindSources& src) {
  const elf::Fde& fde = *copy.original;
  if (!fde.lsda) return std::vector<uint8_t>{};
  // Without a personality the LSDA would be dropped and the copy's handlers
  // and destructors silently skipped.
  if (!fde.personality) return fail("an LSDA without a personality routine");
  if (fde.lsda < src.lsda_section_addr || fde.lsda - src.lsda_section_addr >= src.lsda_section.size())
    return fail(fmt::format("LSDA at {:#x} outside .gcc_except_table", fde.lsda));
  LsdaSource lsda{src.lsda_section.subspan(fde.lsda - src.lsda_section_addr), fde.lsda, fde.begin, src.bias};
  // Invariant: no landing pad lies inside the entry patch's bytes (the copy's
  // pads are the original's): the unwinder would resume in the middle of
  // dyni's jmp. patch_plan.h checks branch targets alone; pads are here.
  if (copy.entry_patch) {
    auto pads = landing_pads(lsda);
    if (!pads) return std::unexpected(pads.error());
    for (uint64_t pad : *pads)
      if (pad > copy.entry_patch && pad < copy.entry_patch + kEntryPatchSize)
        return fail(fmt::format("landing pad at {:#x} in the entry bytes", pad));
  }
  return translate_lsda(lsda, *copy.code);
}

}  // namespace

Result<std::vector<uint8_t>> write_cache_eh_frame(std::span<const CopyFrames> copies, const UnwindSources& src,
                                                  uint64_t blob_addr) {
  std::vector<uint8_t> out;
  std::map<CieKey, std::size_t> cies;
  std::vector<std::vector<uint8_t>> lsdas;
  std::vector<std::size_t> lsda_fields;  // where each FDE's LSDA pointer goes
  for (const CopyFrames& copy : copies) {
    uint64_t begin = copy.code->base + src.bias;
    auto lsda = copy_lsda(copy, src);
    if (!lsda) return fail(fmt::format("copy of {:#x}: {}", copy.original->begin, lsda.error().message()));
    CieKey key = cie_key(*copy.original, src.bias);
    if (!cies.count(key)) cies[key] = put_cie(out, key);
    std::size_t start = out.size();
    put<uint32_t>(out, 0);
    put<uint32_t>(out, static_cast<uint32_t>(out.size() - cies[key]));  // back to the CIE
    put<uint64_t>(out, begin);
    put<uint64_t>(out, copy.code->bytes.size());
    bool has_lsda_field = std::get<0>(key) != 0;
    put_uleb(out, has_lsda_field ? 8 : 0);
    lsda_fields.push_back(has_lsda_field && !lsda->empty() ? out.size() : 0);
    if (has_lsda_field) put<uint64_t>(out, 0);  // 0: no LSDA (filled in below)
    if (auto s = put_program(out, copy, src.eh_frame); !s)
      return fail(fmt::format("copy of {:#x}: {}", copy.original->begin, s.error().message()));
    close_record(out, start);
    lsdas.push_back(std::move(*lsda));
  }
  put<uint32_t>(out, 0);  // terminator
  for (std::size_t i = 0; i < lsdas.size(); ++i) {
    if (!lsda_fields[i]) continue;
    while (out.size() % 4) out.push_back(0);
    put_at<uint64_t>(out, lsda_fields[i], blob_addr + out.size());
    out.insert(out.end(), lsdas[i].begin(), lsdas[i].end());
  }
  return out;
}

Result<std::vector<uint8_t>> eh_frame_search_table(std::span<const uint8_t> blob, uint64_t blob_addr,
                                                   uint64_t table_addr) {
  auto fdes = elf::parse_eh_frame(blob, blob_addr);
  if (!fdes) return std::unexpected(fdes.error());
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (const elf::Fde& f : *fdes) {
    int64_t start = static_cast<int64_t>(f.begin - table_addr);
    int64_t fde = static_cast<int64_t>(blob_addr + f.offset - table_addr);
    if (start != static_cast<int32_t>(start) || fde != static_cast<int32_t>(fde))
      return fail(fmt::format("FDE for {:#x} is too far from the search table at {:#x}", f.begin, table_addr));
    rows.emplace_back(start, fde);
  }
  std::sort(rows.begin(), rows.end());
  std::vector<uint8_t> out;
  for (auto [start, fde] : rows) {
    put<int32_t>(out, static_cast<int32_t>(start));
    put<int32_t>(out, static_cast<int32_t>(fde));
  }
  return out;
}

}  // namespace dyni::jit
