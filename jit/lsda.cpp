// Re-addressing a function's LSDA for its copy.
#include "jit/lsda.h"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "elf/byte_reader.h"
#include "jit/byte_writer.h"

namespace dyni::jit {
namespace {

constexpr uint8_t kOmit = 0xff, kAbsptr = 0x00, kUleb128 = 0x01, kPcrel = 0x10, kIndirect = 0x80;

struct CallSite {
  uint64_t start = 0, length = 0, landing_pad = 0, action = 0;  // as encoded: offsets
};

// The parts of an original LSDA.
struct ParsedLsda {
  uint64_t lpstart = 0;  // absolute, link-time
  uint8_t ttype_encoding = kOmit;
  std::size_t ttype_base = 0;  // offset in the LSDA
  std::vector<CallSite> sites;
  std::size_t actions = 0, actions_end = 0;  // the action table's span (offsets)
  uint64_t type_count = 0;                   // entries below ttype_base
  std::size_t specs_end = 0;                 // the spec table: [ttype_base, specs_end)
};

std::size_t encoded_size(uint8_t encoding) {
  switch (encoding & 0x0f) {
    case 0x00: case 0x04: case 0x0c: return 8;
    case 0x02: case 0x0a: return 2;
    case 0x03: case 0x0b: return 4;
    default: return 0;  // leb128 forms are not fixed-size
  }
}

// A DW_EH_PE value at the reader's position; pc-relative values resolved
// against `addr` (the LSDA's link-time address). Raw zero means null.
std::optional<uint64_t> read_encoded(elf::ByteReader& r, uint8_t encoding, uint64_t addr) {
  uint64_t field = addr + r.pos();
  std::optional<uint64_t> v;
  switch (encoding & 0x0f) {
    case 0x00: case 0x04: v = r.read<uint64_t>(); break;
    case 0x01: v = r.uleb128(); break;
    case 0x02: if (auto x = r.read<uint16_t>()) v = *x; break;
    case 0x03: if (auto x = r.read<uint32_t>()) v = *x; break;
    case 0x09: if (auto x = r.sleb128()) v = static_cast<uint64_t>(*x); break;
    case 0x0a: if (auto x = r.read<int16_t>()) v = static_cast<uint64_t>(int64_t{*x}); break;
    case 0x0b: if (auto x = r.read<int32_t>()) v = static_cast<uint64_t>(int64_t{*x}); break;
    case 0x0c: if (auto x = r.read<int64_t>()) v = static_cast<uint64_t>(*x); break;
    default: return std::nullopt;
  }
  if (!v || *v == 0) return v;
  switch (encoding & 0x70) {
    case 0x00: return v;
    case kPcrel: return *v + field;
    default: return std::nullopt;
  }
}

// Limits on untrusted tables (I9): real LSDAs have a few hundred call sites
// and short chains; anything larger is refused, not searched.
constexpr std::size_t kMaxCallSites = 20000, kMaxActions = 20000, kMaxSpecEntries = 1000;

// Reads the exception specification at offset `at` (a 0-terminated uleb128
// list of type indices): its end, and the largest index, which the type
// table must hold too.
Status scan_spec(elf::ByteReader& r, std::size_t at, ParsedLsda& lsda) {
  if (!r.seek(at)) return fail("LSDA exception specification outside");
  for (std::size_t i = 0;; ++i) {
    auto index = r.uleb128();
    if (!index || i == kMaxSpecEntries) return fail("LSDA exception specification malformed");
    if (*index == 0) break;
    lsda.type_count = std::max(lsda.type_count, *index);
  }
  lsda.specs_end = std::max(lsda.specs_end, r.pos());
  return ok();
}

// One action record at `at`: its filter, and the offset of the next (0: none).
Status scan_action(elf::ByteReader& r, std::size_t at, ParsedLsda& lsda, std::size_t& next_at) {
  if (!r.seek(at)) return fail("LSDA action outside the table");
  auto filter = r.sleb128();
  std::size_t next_field = r.pos();
  auto next = r.sleb128();
  if (!filter || !next || *filter == INT64_MIN) return fail("LSDA action malformed");
  lsda.actions_end = std::max(lsda.actions_end, r.pos());
  if (*filter > 0) lsda.type_count = std::max(lsda.type_count, static_cast<uint64_t>(*filter));
  if (*filter < 0) {  // at ttype_base + (-filter - 1)
    uint64_t spec = static_cast<uint64_t>(-*filter) - 1;
    if (lsda.ttype_encoding == kOmit || spec > r.size() - lsda.ttype_base) return fail("LSDA spec outside");
    if (auto s = scan_spec(r, lsda.ttype_base + spec, lsda); !s) return s;
  }
  next_at = 0;
  if (*next == 0) return ok();
  int64_t target = static_cast<int64_t>(next_field) + *next;  // |next| < 2^63 and next_field small: no overflow
  if (*next < -static_cast<int64_t>(next_field) || target < static_cast<int64_t>(lsda.actions) ||
      static_cast<uint64_t>(target) >= r.size())
    return fail("LSDA action chain leaves the table");
  next_at = static_cast<std::size_t>(target);
  return ok();
}

// Follows every action chain a call site starts, for the table's extent, the
// number of type entries and the extent of the exception specifications. A
// record reached twice in one chain is a cycle: refused.
Status scan_actions(elf::ByteReader r, ParsedLsda& lsda) {
  lsda.actions_end = lsda.actions;
  lsda.specs_end = lsda.ttype_base;
  std::set<std::size_t> scanned;  // records already followed (from any site)
  for (const CallSite& site : lsda.sites) {
    if (site.action == 0) continue;
    if (site.action - 1 > r.size() - lsda.actions) return fail("LSDA action outside the table");
    std::set<std::size_t> chain;
    for (std::size_t at = lsda.actions + site.action - 1; at != 0;) {
      if (!chain.insert(at).second) return fail("LSDA action chain loops");
      if (scanned.size() > kMaxActions) return fail("LSDA has too many actions");
      if (!scanned.insert(at).second) break;  // the rest of this chain is known
      if (auto s = scan_action(r, at, lsda, at); !s) return s;
    }
  }
  return ok();
}

Result<ParsedLsda> parse(const LsdaSource& src) {
  elf::ByteReader r(src.bytes);
  ParsedLsda lsda;
  auto lpstart_encoding = r.read<uint8_t>();
  if (!lpstart_encoding) return fail("LSDA truncated");
  lsda.lpstart = src.region_start;
  if (*lpstart_encoding != kOmit) {
    auto lp = read_encoded(r, *lpstart_encoding, src.addr);
    if (!lp) return fail("LSDA LPStart encoding unsupported");
    lsda.lpstart = *lp;
  }
  auto ttype_encoding = r.read<uint8_t>();
  if (!ttype_encoding) return fail("LSDA truncated");
  lsda.ttype_encoding = *ttype_encoding;
  if (lsda.ttype_encoding != kOmit) {
    auto off = r.uleb128();
    if (!off || *off > src.bytes.size() - r.pos()) return fail("LSDA type table offset malformed");
    lsda.ttype_base = r.pos() + *off;
    if (encoded_size(lsda.ttype_encoding) == 0) return fail("LSDA type table encoding unsupported");
  }
  auto cs_encoding = r.read<uint8_t>();
  auto cs_length = r.uleb128();
  if (!cs_encoding || !cs_length || *cs_length > src.bytes.size() - r.pos()) return fail("LSDA call-site table malformed");
  // Call-site fields are plain offsets: uleb128 or unsigned fixed sizes only.
  if (*cs_encoding != 0x01 && *cs_encoding != 0x02 && *cs_encoding != 0x03 && *cs_encoding != 0x04)
    return fail(fmt::format("LSDA call-site encoding {:#x} unsupported", *cs_encoding));
  std::size_t cs_end = r.pos() + *cs_length;
  while (r.pos() < cs_end) {
    auto start = read_encoded(r, *cs_encoding, 0), length = read_encoded(r, *cs_encoding, 0);
    auto pad = read_encoded(r, *cs_encoding, 0);
    auto action = r.uleb128();
    if (!start || !length || !pad || !action || r.pos() > cs_end) return fail("LSDA call site malformed");
    if (!lsda.sites.empty() && *start < lsda.sites.back().start + lsda.sites.back().length)
      return fail("LSDA call sites not sorted");  // the personality's own assumption
    if (lsda.sites.size() == kMaxCallSites) return fail("LSDA has too many call sites");
    lsda.sites.push_back({*start, *length, *pad, *action});
  }
  lsda.actions = cs_end;
  if (auto s = scan_actions(r, lsda); !s) return std::unexpected(s.error());
  if (lsda.ttype_encoding != kOmit && lsda.type_count > lsda.ttype_base / encoded_size(lsda.ttype_encoding))
    return fail("LSDA type table overlaps its header");
  return lsda;
}

// The original call site holding `original_addr`, or -1 (cannot throw).
// The sites are sorted and disjoint (parse checks it).
int site_of(const ParsedLsda& lsda, uint64_t region_start, uint64_t original_addr) {
  if (original_addr < region_start) return -1;
  uint64_t offset = original_addr - region_start;
  auto after = std::upper_bound(lsda.sites.begin(), lsda.sites.end(), offset,
                                [](uint64_t o, const CallSite& s) { return o < s.start; });
  if (after == lsda.sites.begin()) return -1;
  const CallSite& s = *std::prev(after);
  return offset - s.start < s.length ? static_cast<int>(std::prev(after) - lsda.sites.begin()) : -1;
}

// The copy's LPStart: below the original's start and every landing pad, so
// that each pad is a non-zero offset from it (0 means "no pad"). Never 0:
// older libc++abi reads an LPStart of 0 as "the function's start".
uint64_t copy_lpstart(const ParsedLsda& lsda, const LsdaSource& src) {
  uint64_t low = src.region_start + src.bias;
  for (const CallSite& s : lsda.sites)
    if (s.landing_pad) low = std::min(low, lsda.lpstart + s.landing_pad + src.bias);
  return low - 1;
}

// Call sites for the copy: runs of cache instructions in one original site.
std::vector<uint8_t> copy_call_sites(const ParsedLsda& lsda, const LsdaSource& src, const EmittedCode& copy,
                                     uint64_t lpstart) {
  std::vector<uint8_t> out;
  uint64_t copy_end = copy.base + copy.code_size;
  int open = -1;
  uint64_t run_start = 0;
  auto close = [&](uint64_t end) {
    if (open < 0) return;
    const CallSite& s = lsda.sites[static_cast<std::size_t>(open)];
    put_uleb(out, run_start - copy.base);
    put_uleb(out, end - run_start);
    put_uleb(out, s.landing_pad ? lsda.lpstart + s.landing_pad + src.bias - lpstart : 0);
    put_uleb(out, s.action);
  };
  for (const TranslationEntry& t : copy.translation) {
    int site = t.kind == Translation::Jump ? -1 : site_of(lsda, src.region_start, t.original_addr);
    if (site == open) continue;
    close(t.new_addr);
    open = site;
    run_start = t.new_addr;
  }
  close(copy_end);
  return out;
}

}  // namespace

Result<std::vector<uint64_t>> landing_pads(const LsdaSource& src) {
  auto lsda = parse(src);
  if (!lsda) return std::unexpected(lsda.error());
  std::vector<uint64_t> pads;
  for (const CallSite& s : lsda->sites)
    if (s.landing_pad) pads.push_back(lsda->lpstart + s.landing_pad);
  return pads;
}

Result<std::vector<uint8_t>> translate_lsda(const LsdaSource& src, const EmittedCode& copy) {
  auto lsda = parse(src);
  if (!lsda) return std::unexpected(lsda.error());
  bool has_types = lsda->ttype_encoding != kOmit;
  if (has_types && (lsda->ttype_encoding & 0x70) != kPcrel && src.bias != 0)
    return fail("LSDA type table with absolute addresses in a relocated module");
  if (lsda->specs_end > src.bytes.size() || lsda->actions_end > src.bytes.size())
    return fail("LSDA tables past its section");
  std::vector<uint8_t> body;  // after the type-table offset field
  body.push_back(kUleb128);
  uint64_t lpstart = copy_lpstart(*lsda, src);
  std::vector<uint8_t> sites = copy_call_sites(*lsda, src, copy, lpstart);
  put_uleb(body, sites.size());
  body.insert(body.end(), sites.begin(), sites.end());
  body.insert(body.end(), src.bytes.begin() + static_cast<std::ptrdiff_t>(lsda->actions),
              src.bytes.begin() + static_cast<std::ptrdiff_t>(lsda->actions_end));
  if (has_types) {
    std::size_t size = encoded_size(lsda->ttype_encoding);
    for (uint64_t i = lsda->type_count; i >= 1; --i) {  // the table grows down from its base: entry 1 is last
      elf::ByteReader r(src.bytes, lsda->ttype_base - i * size);
      auto value = read_encoded(r, lsda->ttype_encoding, src.addr);
      if (!value) return fail("LSDA type entry malformed");
      put<uint64_t>(body, *value ? *value + src.bias : 0);
    }
    body.insert(body.end(), src.bytes.begin() + static_cast<std::ptrdiff_t>(lsda->ttype_base),
                src.bytes.begin() + static_cast<std::ptrdiff_t>(lsda->specs_end));
  }
  std::vector<uint8_t> out;
  out.push_back(kAbsptr);  // LPStart, absolute: the pads stay in the original code
  put<uint64_t>(out, lpstart);
  out.push_back(has_types ? static_cast<uint8_t>(lsda->ttype_encoding & kIndirect) : kOmit);
  if (has_types) {
    std::size_t specs = lsda->specs_end - lsda->ttype_base;
    put_uleb(out, body.size() - specs);  // from after this field to the type table's base
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace dyni::jit
