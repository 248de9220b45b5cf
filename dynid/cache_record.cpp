// Encoding and checking the record a code cache carries about itself.
#include "dynid/cache_record.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "elf/byte_reader.h"
#include "jit/call_sites.h"
#include "jit/entry_pads.h"

namespace dyni {
namespace {

constexpr std::size_t kPatchEntryBytes = 24;  // addr, original, replacement, padding
constexpr std::size_t kSiteEntryBytes = 16;   // addr, form bits, padding
constexpr std::size_t kSlotEntryBytes = 24;   // addr, original, replacement
constexpr std::size_t kHeadBytes = 8 + 4 + 4 + 1 + 64 + 7 + 12 * 8 + 8;  // at most, before the entries

uint64_t fnv1a(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ULL;
  return h;
}

// Appends raw bytes (resize + memcpy: GCC 12 warns falsely on vector::insert here).
void put_bytes(std::vector<uint8_t>& out, const void* p, std::size_t n) {
  std::size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

std::string hex(std::span<const uint8_t> bytes) {
  std::string s;
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> out;
  for (std::size_t i = 0; i + 1 < s.size() && out.size() < 64; i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return out;
}

bool inside(uint64_t offset, uint64_t size, uint64_t length) { return offset <= length && size <= length - offset; }

// The patch is a jmp rel32 whose target lies in the cache.
bool jumps_into(const PatchRecord& p, uint64_t cache_addr, uint64_t cache_length) {
  if (p.replacement[0] != 0xe9) return false;
  uint64_t target = jit::rel32_target(p.addr, p.replacement);
  return target >= cache_addr && target - cache_addr < cache_length;
}

// How far into a function its entry patch may lie in a record of `version`.
uint64_t max_entry_offset(uint32_t version) {
  return version >= 8 ? jit::kMaxEntryPatchOffset : version == 7 ? jit::kMaxEntryPatchOffsetV7 : 0;
}

// The entry patch of the function that starts at `start`: at `start`, or
// (version 7) after its kept instructions.
bool entry_patched_at(const std::set<uint64_t>& entries, uint64_t start, uint32_t version) {
  auto it = entries.lower_bound(start);
  return it != entries.end() && *it - start <= max_entry_offset(version);
}

// A call site's patch (I9: undo writes its `original` back) changes only
// the displacement of a call or jmp rel32, from a function whose entry this
// record patches to the cache.
bool repoints_a_call(const PatchRecord& p, const std::set<uint64_t>& entries, uint64_t cache_addr,
                     uint64_t cache_length, uint32_t version) {
  const uint8_t op = p.original[0];
  if (op != p.replacement[0] || !(op == 0xe8 || op == 0xe9)) return false;
  uint64_t target = jit::rel32_target(p.addr, p.replacement);
  return entry_patched_at(entries, jit::rel32_target(p.addr, p.original), version) && target >= cache_addr &&
         target - cache_addr < cache_length;
}

// A short entry's other 3 bytes are the file's (only `eb rel8` is written).
bool short_jump_only(const PatchRecord& p) {
  return std::equal(p.original.begin() + 2, p.original.end(), p.replacement.begin() + 2);
}

// Every patch is an entry's jump into the cache (or a short jump to a pad
// that jumps there, each pad reached by one), or a call site re-pointed
// from one of those entries into the cache.
Status check_patches(const CacheRecord& rec, uint32_t version) {
  std::set<uint64_t> entries, pads, padded;
  for (const PatchRecord& p : rec.patches)
    if (p.kind == PatchKind::Pad) {
      if (!jumps_into(p, rec.cache_addr, rec.cache_length))
        return fail(fmt::format("cache record: pad at {:#x} is not a jump into the cache", p.addr));
      pads.insert(p.addr);
    }
  for (const PatchRecord& p : rec.patches) {
    if (p.kind != PatchKind::Entry) continue;
    const bool through_pad = is_short_entry(p) && short_jump_only(p) && pads.count(short_entry_pad(p)) &&
                             padded.insert(short_entry_pad(p)).second;
    if (!through_pad && !jumps_into(p, rec.cache_addr, rec.cache_length))
      return fail(fmt::format("cache record: patch at {:#x} is not a jump into the cache", p.addr));
    entries.insert(p.addr);
  }
  for (const PatchRecord& p : rec.patches)
    if (p.kind == PatchKind::CallSite && !repoints_a_call(p, entries, rec.cache_addr, rec.cache_length, version))
      return fail(fmt::format("cache record: call site at {:#x} is not a call re-pointed from an entry to the cache",
                              p.addr));
  // No call site shares a byte with another patch. Patches are 5 bytes
  // each: one that overlaps a later one overlaps every patch between them,
  // so neighbours by address suffice.
  std::vector<const PatchRecord*> by_addr;
  for (const PatchRecord& p : rec.patches) by_addr.push_back(&p);
  std::sort(by_addr.begin(), by_addr.end(), [](const auto* a, const auto* b) { return a->addr < b->addr; });
  for (std::size_t i = 1; i < by_addr.size(); ++i) {
    const PatchRecord &a = *by_addr[i - 1], &b = *by_addr[i];
    if (a.addr + 5 > b.addr && (a.kind != PatchKind::Entry || b.kind != PatchKind::Entry))
      return fail(fmt::format("cache record: a call site or pad at {:#x} overlaps another patch",
                              a.kind != PatchKind::Entry ? a.addr : b.addr));
  }
  return ok();
}

// Every slot (I9: undo writes `original` back where `replacement` is) is
// 8-aligned outside the cache, once; it held the start of a function whose
// entry this record patches, and now holds a copy's address in the code.
Status check_slots(const CacheRecord& rec) {
  std::set<uint64_t> entries, seen;
  for (const PatchRecord& p : rec.patches)
    if (p.kind == PatchKind::Entry) entries.insert(p.addr);
  const uint64_t code = rec.cache_addr + rec.code_offset;
  for (const SlotRecord& s : rec.slots) {
    const bool in_cache = s.addr + 8 > rec.cache_addr && s.addr < rec.cache_addr + rec.cache_length;
    if (s.addr % 8 || in_cache || !seen.insert(s.addr).second)
      return fail(fmt::format("cache record: GOT slot at {:#x} is misplaced or repeated", s.addr));
    if (!entry_patched_at(entries, s.original, CacheRecord::kVersion) || s.replacement < code ||
        s.replacement - code >= rec.code_size)
      return fail(fmt::format("cache record: GOT slot at {:#x} is not re-pointed from an entry to the code", s.addr));
  }
  return ok();
}

// A counting cache has its counters in a mapping of its own, beside it and
// not overlapping it; an optimized one has neither counters nor sites.
Status check_tier(CacheRecord& rec, uint64_t tier, uint32_t sites) {
  if (tier > static_cast<uint64_t>(CacheTier::Counting)) return fail("cache record: unknown tier");
  rec.tier = static_cast<CacheTier>(tier);
  bool counting = rec.tier == CacheTier::Counting;
  if (!counting) {
    if (rec.counters_addr || rec.counters_length || sites) return fail("cache record: counters in an optimized cache");
    return ok();
  }
  bool apart = rec.counters_addr >= rec.cache_addr + rec.cache_length ||
               rec.counters_addr + rec.counters_length <= rec.cache_addr;
  if (!rec.counters_length || rec.counters_length > (uint64_t{1} << 32) || rec.counters_addr % 4096 ||
      rec.counters_addr + rec.counters_length < rec.counters_addr || !apart)
    return fail("cache record: a counting cache's counters are misplaced");
  return ok();
}

}  // namespace

std::size_t count_of(const std::vector<PatchRecord>& patches, PatchKind kind) {
  return static_cast<std::size_t>(
      std::count_if(patches.begin(), patches.end(), [&](const PatchRecord& p) { return p.kind == kind; }));
}

bool is_short_entry(const PatchRecord& p) { return p.kind == PatchKind::Entry && p.replacement[0] == jit::kJmpRel8Opcode; }

uint64_t short_entry_pad(const PatchRecord& p) { return p.addr + 2 + static_cast<int8_t>(p.replacement[1]); }

std::map<uint64_t, uint64_t> pad_entries(std::span<const PatchRecord> patches) {
  std::map<uint64_t, uint64_t> out;
  for (const PatchRecord& p : patches)
    if (is_short_entry(p)) out[short_entry_pad(p)] = p.addr;
  return out;
}

uint64_t entry_jump_target(const PatchRecord& entry, std::span<const PatchRecord> patches) {
  if (!is_short_entry(entry)) return jit::rel32_target(entry.addr, entry.replacement);
  const uint64_t pad = short_entry_pad(entry);
  for (const PatchRecord& p : patches)
    if (p.kind == PatchKind::Pad && p.addr == pad) return jit::rel32_target(p.addr, p.replacement);
  return 0;
}

std::size_t record_size(std::size_t patches, std::size_t counter_sites, std::size_t slots) {
  return kHeadBytes + kPatchEntryBytes * patches + kSiteEntryBytes * counter_sites + 8 + kSlotEntryBytes * slots + 8;
}

std::vector<uint8_t> encode_record(const CacheRecord& r) {
  std::vector<uint8_t> out;
  put_bytes(out, kRecordMagic.data(), kRecordMagic.size());
  // The lowest version that holds it: a dynid that reads 3 still knows a
  // cache with no striped or value site (an older dynid after a downgrade).
  auto any = [&](bool jit::CounterForm::*bit) {
    return std::any_of(r.counter_sites.begin(), r.counter_sites.end(), [&](const CounterSiteRecord& c) { return c.form.*bit; });
  };
  std::set<uint64_t> entries;
  for (const PatchRecord& p : r.patches)
    if (p.kind == PatchKind::Entry) entries.insert(p.addr);
  const bool call_sites = count_of(r.patches, PatchKind::CallSite) > 0;
  // How far past its callee's start a call site's entry patch lies, at most.
  uint64_t entry_offset = 0;
  for (const PatchRecord& p : r.patches) {
    if (p.kind != PatchKind::CallSite) continue;
    const uint64_t start = jit::rel32_target(p.addr, p.original);
    auto it = entries.lower_bound(start);
    if (it != entries.end()) entry_offset = std::max(entry_offset, *it - start);
  }
  const bool from_starts = entry_offset > 0;
  const bool pads = count_of(r.patches, PatchKind::Pad) > 0;
  put<uint32_t>(out, pads ? 10
                     : !r.slots.empty() ? 9
                     : entry_offset > jit::kMaxEntryPatchOffsetV7 ? 8
                     : from_starts  ? 7
                     : call_sites ? 6
                     : any(&jit::CounterForm::value)   ? 5
                     : any(&jit::CounterForm::striped) ? 4
                                                       : 3);
  put<uint32_t>(out, 0);  // total size, set below
  std::vector<uint8_t> id = unhex(r.build_id);
  out.push_back(static_cast<uint8_t>(id.size()));
  put_bytes(out, id.data(), id.size());
  while (out.size() % 8) out.push_back(0);
  for (uint64_t v : {r.module_bias, r.cache_addr, r.cache_length, r.code_offset, r.code_size, r.eh_frame_offset,
                     r.eh_frame_size, r.search_table_offset, r.search_table_size, static_cast<uint64_t>(r.tier),
                     r.counters_addr, r.counters_length})
    put<uint64_t>(out, v);
  put<uint32_t>(out, static_cast<uint32_t>(r.patches.size()));
  put<uint32_t>(out, static_cast<uint32_t>(r.counter_sites.size()));
  for (const PatchRecord& p : r.patches) {
    put<uint64_t>(out, p.addr);
    put_bytes(out, p.original.data(), p.original.size());
    put_bytes(out, p.replacement.data(), p.replacement.size());
    out.push_back(static_cast<uint8_t>(p.kind));  // 0 in every version before 6
    out.resize(out.size() + kPatchEntryBytes - 19, 0);
  }
  for (const CounterSiteRecord& c : r.counter_sites) {
    put<uint64_t>(out, c.addr);
    out.push_back(c.form.bits());
    out.resize(out.size() + kSiteEntryBytes - 9, 0);
  }
  if (pads || !r.slots.empty()) {  // version 9 and later: a count, then the slots
    put<uint32_t>(out, static_cast<uint32_t>(r.slots.size()));
    put<uint32_t>(out, 0);
    for (const SlotRecord& s : r.slots)
      for (uint64_t v : {s.addr, s.original, s.replacement}) put<uint64_t>(out, v);
  }
  uint32_t total = static_cast<uint32_t>(out.size() + 8);
  std::memcpy(out.data() + 12, &total, 4);
  put<uint64_t>(out, fnv1a(out));
  return out;
}

Result<CacheRecord> decode_record(std::span<const uint8_t> bytes, uint64_t mapping_addr, uint64_t mapping_length) {
  elf::ByteReader r(bytes);
  std::array<uint8_t, 8> magic{};
  for (auto& b : magic)
    if (auto v = r.read<uint8_t>()) b = *v;
  if (magic != kRecordMagic) return fail("no dyni cache record (magic)");
  auto version = r.read<uint32_t>();
  auto total = r.read<uint32_t>();
  if (!version) return fail("cache record: no version");
  if (*version < CacheRecord::kOldestVersion || *version > CacheRecord::kVersion)
    return fail(fmt::format("cache record: unknown version {} (this dynid reads {} to {})", *version,
                            CacheRecord::kOldestVersion, CacheRecord::kVersion));
  if (!total || *total < 16 || *total > bytes.size() || *total > kMaxRecordBytes) return fail("cache record: bad size");
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + *total - 8, 8);
  if (sum != fnv1a(bytes.first(*total - 8))) return fail("cache record: checksum mismatch");
  CacheRecord rec;
  auto id_len = r.read<uint8_t>();
  if (!id_len || *id_len > 64 || *id_len > *total - r.pos()) return fail("cache record: bad build-id");
  rec.build_id = hex(bytes.subspan(r.pos(), *id_len));
  r.seek((r.pos() + *id_len + 7) & ~std::size_t{7});
  uint64_t* fields[] = {&rec.module_bias, &rec.cache_addr, &rec.cache_length, &rec.code_offset, &rec.code_size,
                        &rec.eh_frame_offset, &rec.eh_frame_size, &rec.search_table_offset,
                        &rec.search_table_size};
  for (uint64_t* f : fields) {
    auto v = r.read<uint64_t>();
    if (!v) return fail("cache record: truncated");
    *f = *v;
  }
  uint64_t tier = 0;
  if (*version >= 3) {  // the tier and the counters' mapping
    for (uint64_t* f : {&tier, &rec.counters_addr, &rec.counters_length}) {
      auto v = r.read<uint64_t>();
      if (!v) return fail("cache record: truncated");
      *f = *v;
    }
  }
  auto count = r.read<uint32_t>();
  auto sites = *version >= 3 ? r.read<uint32_t>() : std::optional<uint32_t>(r.skip(4) ? std::optional<uint32_t>(0) : std::nullopt);
  // The patches and sites fill what lies between here and the checksum.
  if (!count || !sites || r.pos() + 8 > *total || *count > (*total - 8 - r.pos()) / kPatchEntryBytes ||
      *sites > (*total - 8 - r.pos() - kPatchEntryBytes * *count) / kSiteEntryBytes)
    return fail("cache record: bad patch count");
  if (auto checked = check_tier(rec, tier, *sites); !checked) return std::unexpected(checked.error());
  if (rec.cache_addr != mapping_addr || rec.cache_length != mapping_length ||
      !inside(rec.code_offset, rec.code_size, rec.cache_length) ||
      !inside(rec.eh_frame_offset, rec.eh_frame_size, rec.cache_length) ||
      !inside(rec.search_table_offset, rec.search_table_size, rec.cache_length) || rec.search_table_size % 8)
    return fail("cache record: ranges do not match its mapping");
  for (uint32_t i = 0; i < *count; ++i) {
    PatchRecord p;
    p.addr = *r.read<uint64_t>();
    for (auto& b : p.original) b = *r.read<uint8_t>();
    for (auto& b : p.replacement) b = *r.read<uint8_t>();
    const uint8_t kind = *r.read<uint8_t>();
    r.skip(kPatchEntryBytes - 19);
    const PatchKind newest = *version >= 10 ? PatchKind::Pad : PatchKind::CallSite;
    if (*version >= 6 && kind > static_cast<uint8_t>(newest))
      return fail(fmt::format("cache record: patch at {:#x} has an unknown kind", p.addr));
    p.kind = *version >= 6 ? static_cast<PatchKind>(kind) : PatchKind::Entry;
    rec.patches.push_back(p);
  }
  if (auto checked = check_patches(rec, *version); !checked) return std::unexpected(checked.error());
  for (uint32_t i = 0; i < *sites; ++i) {
    CounterSiteRecord c;
    c.addr = *r.read<uint64_t>();
    const uint8_t form = *r.read<uint8_t>();
    // 4 knows the striped bit, 5 the value bit (never with striped).
    const bool known = *version >= 5 ? (form <= jit::CounterForm{true, true}.bits() ||
                                        form == jit::CounterForm{false, false, true}.bits() ||
                                        form == jit::CounterForm{true, false, true}.bits())
                                     : form <= jit::CounterForm{true, true}.bits();
    if (*version >= 4 && !known)
      return fail(fmt::format("cache record: counter site at {:#x} has an unknown form", c.addr));
    c.form = *version >= 4 ? jit::CounterForm::from_bits(form) : jit::CounterForm{form != 0, false};
    r.skip(kSiteEntryBytes - 9);
    if (!inside(c.addr - rec.cache_addr - rec.code_offset, 2, rec.code_size))  // below the code: wraps, outside
      return fail(fmt::format("cache record: counter site at {:#x} is not in the code", c.addr));
    rec.counter_sites.push_back(c);
  }
  if (*version >= 9) {
    auto slots = r.read<uint32_t>();
    if (!slots || !r.skip(4) || r.pos() + 8 > *total || *slots > (*total - 8 - r.pos()) / kSlotEntryBytes)
      return fail("cache record: bad slot count");
    for (uint32_t i = 0; i < *slots; ++i) {
      SlotRecord s;
      s.addr = *r.read<uint64_t>(), s.original = *r.read<uint64_t>(), s.replacement = *r.read<uint64_t>();
      rec.slots.push_back(s);
    }
    if (auto checked = check_slots(rec); !checked) return std::unexpected(checked.error());
  }
  return rec;
}

}  // namespace dyni
