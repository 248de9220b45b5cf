// The record a code cache carries about itself (dynid/cache_record.h):
// round trip, and every kind of damage or forgery refused (I9).
#include "dynid/cache_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace dyni {
namespace {

constexpr uint64_t kCache = 0x55d3a0000000, kLength = 4 << 20;

PatchRecord jump_to(uint64_t from, uint64_t to) {
  PatchRecord p;
  p.addr = from;
  p.original = {0x55, 0x48, 0x89, 0xe5, 0x41};
  p.replacement[0] = 0xe9;
  int32_t rel = static_cast<int32_t>(static_cast<int64_t>(to - (from + 5)));
  std::memcpy(p.replacement.data() + 1, &rel, 4);
  return p;
}

uint32_t version_of(const std::vector<uint8_t>& record) {
  uint32_t version = 0;
  std::memcpy(&version, record.data() + 8, 4);
  return version;
}

CacheRecord sample() {
  CacheRecord r;
  r.build_id = "8c2f1a0b9e77d1c4aa0e6f3b5d21c09e1f2a3b4c";
  r.module_bias = 0x55d3a1234000;
  r.cache_addr = kCache, r.cache_length = kLength;
  r.code_offset = 4096, r.code_size = 600000;
  r.eh_frame_offset = 604160, r.eh_frame_size = 90000;
  r.search_table_offset = 694160, r.search_table_size = 50 * 8;
  for (uint64_t i = 0; i < 50; ++i) r.patches.push_back(jump_to(0x55d3a1300000 + i * 0x140, kCache + 4096 + i * 64));
  return r;
}

TEST(CacheRecord, RoundTrips) {
  CacheRecord r = sample();
  std::vector<uint8_t> bytes = encode_record(r);
  bytes.resize(bytes.size() + 100, 0xcc);  // the cache's code follows
  auto back = decode_record(bytes, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->build_id, r.build_id);
  EXPECT_EQ(back->module_bias, r.module_bias);
  EXPECT_EQ(back->code_size, r.code_size);
  EXPECT_EQ(back->eh_frame_offset, r.eh_frame_offset);
  EXPECT_EQ(back->search_table_offset, r.search_table_offset);
  EXPECT_EQ(back->search_table_size, r.search_table_size);
  ASSERT_EQ(back->patches.size(), r.patches.size());
  EXPECT_EQ(back->patches[7].addr, r.patches[7].addr);
  EXPECT_EQ(back->patches[7].original, r.patches[7].original);
  EXPECT_EQ(back->patches[7].replacement, r.patches[7].replacement);
}

TEST(CacheRecord, RefusesDamageAndForgery) {
  std::vector<uint8_t> good = encode_record(sample());
  EXPECT_FALSE(decode_record(good, kCache + 4096, kLength));  // another mapping's record
  EXPECT_FALSE(decode_record(std::span(good).first(good.size() - 1), kCache, kLength));  // truncated
  std::vector<uint8_t> flipped = good;
  flipped[200] ^= 1;
  EXPECT_FALSE(decode_record(flipped, kCache, kLength));  // checksum
  CacheRecord forged = sample();
  forged.patches[3] = jump_to(0x55d3a1300000, 0x7f0000000000);  // a jump out of the cache
  auto f = decode_record(encode_record(forged), kCache, kLength);
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message().find("not a jump into the cache"), std::string::npos);
  CacheRecord outside = sample();
  outside.eh_frame_size = kLength;  // past the mapping's end
  EXPECT_FALSE(decode_record(encode_record(outside), kCache, kLength));
  CacheRecord ragged = sample();
  ragged.search_table_size = 50 * 8 + 3;  // not whole entries
  EXPECT_FALSE(decode_record(encode_record(ragged), kCache, kLength));
  std::vector<uint8_t> none(64, 0);
  EXPECT_FALSE(decode_record(none, kCache, kLength));
}

// Random damage never crashes the decoder or reads past its bytes (run under
// ASan in the fuzz build; here every mutation must simply be answered).
TEST(CacheRecord, SurvivesRandomDamage) {
  std::vector<uint8_t> good = encode_record(sample());
  std::mt19937 rng(5);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes = good;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) bytes[8 + rng() % (bytes.size() - 8)] = static_cast<uint8_t>(rng());
    bytes.resize(rng() % 4 == 0 ? rng() % bytes.size() : bytes.size());
    bool changed = bytes != good;  // a byte may have been set to its own value
    accepted += changed && decode_record(bytes, kCache, kLength).has_value();
  }
  EXPECT_EQ(accepted, 0) << "the checksum should catch every random change";
}

CacheRecord counting_sample() {
  CacheRecord r = sample();
  r.tier = CacheTier::Counting;
  r.counters_addr = kCache + kLength, r.counters_length = 64 * 1024;
  for (uint64_t i = 0; i < 300; ++i) r.counter_sites.push_back({kCache + 4096 + i * 48, {i % 7 == 0, i % 3 == 0}});
  return r;
}

TEST(CacheRecord, ACountingCacheRoundTripsWithItsCountersAndSites) {
  CacheRecord r = counting_sample();
  auto back = decode_record(encode_record(r), kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->tier, CacheTier::Counting);
  EXPECT_EQ(back->counters_addr, r.counters_addr);
  EXPECT_EQ(back->counters_length, r.counters_length);
  ASSERT_EQ(back->counter_sites.size(), r.counter_sites.size());
  EXPECT_EQ(back->counter_sites[7].addr, r.counter_sites[7].addr);
  for (std::size_t i : {0, 7, 8, 9, 21}) EXPECT_EQ(back->counter_sites[i].form, r.counter_sites[i].form) << i;
  EXPECT_TRUE(back->counter_sites[21].form.striped && back->counter_sites[21].form.saves_flags);
  EXPECT_EQ(back->patches.size(), r.patches.size());
  EXPECT_LE(encode_record(r).size(), record_size(r.patches.size(), r.counter_sites.size()));
  EXPECT_EQ(decode_record(encode_record(sample()), kCache, kLength)->tier, CacheTier::Optimized);
}

TEST(CacheRecord, RefusesMisplacedCountersAndSites) {
  CacheRecord overlapping = counting_sample();
  overlapping.counters_addr = kCache + 8192;  // inside the cache
  EXPECT_FALSE(decode_record(encode_record(overlapping), kCache, kLength));
  CacheRecord site_outside = counting_sample();
  site_outside.counter_sites[5].addr = kCache + 100;  // in the record, not the code
  EXPECT_FALSE(decode_record(encode_record(site_outside), kCache, kLength));
  CacheRecord optimized_with_counters = sample();
  optimized_with_counters.counters_addr = kCache + kLength, optimized_with_counters.counters_length = 4096;
  EXPECT_FALSE(decode_record(encode_record(optimized_with_counters), kCache, kLength));
  CacheRecord no_counters = counting_sample();
  no_counters.counters_length = 0;
  EXPECT_FALSE(decode_record(encode_record(no_counters), kCache, kLength));
}

// `body` (a record without its checksum) as `version`, with its size and
// checksum made anew.
std::vector<uint8_t> sealed(std::vector<uint8_t> body, uint32_t version) {
  std::memcpy(body.data() + 8, &version, 4);
  uint32_t total = static_cast<uint32_t>(body.size() + 8);
  std::memcpy(body.data() + 12, &total, 4);
  uint64_t h = 0xcbf29ce484222325ULL;  // the record's FNV-1a checksum
  for (uint8_t b : body) h = (h ^ b) * 0x100000001b3ULL;
  body.resize(body.size() + 8);
  std::memcpy(body.data() + body.size() - 8, &h, 8);
  return body;
}

// A record as dynid wrote it before the counting tier (version 2: no tier,
// no counters, no sites) is still read, as an optimized cache.
std::vector<uint8_t> as_version_2(const CacheRecord& r) {
  std::vector<uint8_t> now = encode_record(r);
  std::vector<uint8_t> v2(now.begin(), now.end() - 8);
  std::size_t fields = (8 + 4 + 4 + 1 + r.build_id.size() / 2 + 7) / 8 * 8;
  v2.erase(v2.begin() + fields + 9 * 8, v2.begin() + fields + 12 * 8);  // tier, counters_addr, counters_length
  return sealed(v2, 2);
}

// Where site `i`'s form byte is in an encoded record.
std::size_t form_byte_of(const CacheRecord& r, std::size_t i) {
  std::size_t fields = (8 + 4 + 4 + 1 + r.build_id.size() / 2 + 7) / 8 * 8;
  return fields + 12 * 8 + 8 + 24 * r.patches.size() + 16 * i + 8;
}

// Version 3 knew one bit of a site's form (saves flags, any nonzero byte);
// version 4's byte holds the form's bits, and a byte beyond them is refused.
TEST(CacheRecord, ASitesFormIsReadByItsVersion) {
  CacheRecord r = counting_sample();
  std::vector<uint8_t> body = encode_record(r);
  body.resize(body.size() - 8);
  ASSERT_EQ(body[form_byte_of(r, 21)], 3) << "site 21 saves flags and is striped";
  ASSERT_EQ(body[form_byte_of(r, 7)], 1);
  std::vector<uint8_t> v3 = body;
  v3[form_byte_of(r, 7)] = 5;  // a version 3 writer's "saves flags"
  auto old = decode_record(sealed(v3, 3), kCache, kLength);
  ASSERT_TRUE(old) << old.error().message();
  EXPECT_EQ(old->counter_sites[7].form, (jit::CounterForm{true, false}));
  EXPECT_EQ(old->counter_sites[8].form, (jit::CounterForm{false, false}));
  std::vector<uint8_t> unknown = body;
  unknown[form_byte_of(r, 8)] = 4;
  auto refused = decode_record(sealed(unknown, 4), kCache, kLength);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("unknown form"), std::string::npos) << refused.error().message();
  EXPECT_TRUE(decode_record(sealed(body, 4), kCache, kLength));
  // Written in the lowest version that holds it: 3 without striped sites,
  // so that a dynid that reads 3 still knows the cache.
  uint32_t version = 0;
  std::memcpy(&version, body.data() + 8, 4);
  EXPECT_EQ(version, 4u);
  CacheRecord shared = counting_sample();
  for (CounterSiteRecord& c : shared.counter_sites) c.form.striped = false;
  std::vector<uint8_t> written = encode_record(shared);
  std::memcpy(&version, written.data() + 8, 4);
  EXPECT_EQ(version, 3u);
  auto back = decode_record(written, kCache, kLength);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->counter_sites[7].form.saves_flags);
}

// Version 5 adds the value bit (value code at indirect calls): a record
// with value sites is written as 5, which reads them back; version 4 refuses
// such a byte, and no version takes a value site for a striped one.
TEST(CacheRecord, ValueSitesNeedVersion5) {
  CacheRecord r = counting_sample();
  r.counter_sites[7].form = {false, false, true};
  r.counter_sites[8].form = {true, false, true};
  std::vector<uint8_t> written = encode_record(r);
  EXPECT_EQ(version_of(written), 5u);
  auto back = decode_record(written, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->counter_sites[7].form, (jit::CounterForm{false, false, true}));
  EXPECT_EQ(back->counter_sites[8].form, (jit::CounterForm{true, false, true}));
  EXPECT_EQ(back->counter_sites[21].form, r.counter_sites[21].form);
  std::vector<uint8_t> body = written;
  body.resize(body.size() - 8);
  auto as_4 = decode_record(sealed(body, 4), kCache, kLength);
  ASSERT_FALSE(as_4) << "a dynid that reads 4 refuses value sites";
  EXPECT_NE(as_4.error().message().find("unknown form"), std::string::npos) << as_4.error().message();
  for (uint8_t bad : {6, 7, 8}) {
    std::vector<uint8_t> b = body;
    b[form_byte_of(r, 7)] = bad;
    EXPECT_FALSE(decode_record(sealed(b, 5), kCache, kLength)) << "form byte " << int(bad);
  }
}

TEST(CacheRecord, AnOlderVersionIsStillRead) {
  auto back = decode_record(as_version_2(sample()), kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->tier, CacheTier::Optimized);
  EXPECT_EQ(back->patches.size(), sample().patches.size());
  EXPECT_EQ(back->patches[3].addr, sample().patches[3].addr);
  EXPECT_EQ(back->search_table_size, sample().search_table_size);
  std::vector<uint8_t> future = encode_record(sample());
  uint32_t version = CacheRecord::kVersion + 1;
  std::memcpy(future.data() + 8, &version, 4);
  auto refused = decode_record(future, kCache, kLength);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("version"), std::string::npos);
}

// A call at `site` to the entry `entry`, re-pointed at `to` (jit/call_sites.h).
PatchRecord call_site(uint64_t site, uint64_t entry, uint64_t to, uint8_t op = 0xe8) {
  PatchRecord p;
  p.addr = site;
  p.kind = PatchKind::CallSite;
  p.original[0] = p.replacement[0] = op;
  int32_t old_rel = static_cast<int32_t>(static_cast<int64_t>(entry - (site + 5)));
  int32_t new_rel = static_cast<int32_t>(static_cast<int64_t>(to - (site + 5)));
  std::memcpy(p.original.data() + 1, &old_rel, 4);
  std::memcpy(p.replacement.data() + 1, &new_rel, 4);
  return p;
}

TEST(CacheRecord, CallSitesRoundTripAsVersion6) {
  CacheRecord r = sample();
  r.patches.push_back(call_site(0x55d3a1400000, r.patches[4].addr, kCache + 4096 + 4 * 64));
  r.patches.push_back(call_site(0x55d3a1400101, r.patches[9].addr, kCache + 4096 + 9 * 64, 0xe9));  // a tail call
  std::vector<uint8_t> bytes = encode_record(r);
  EXPECT_EQ(version_of(bytes), 6u);
  auto back = decode_record(bytes, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(count_of(back->patches, PatchKind::Entry), 50u);
  ASSERT_EQ(count_of(back->patches, PatchKind::CallSite), 2u);
  EXPECT_EQ(back->patches[51].addr, r.patches[51].addr);
  EXPECT_EQ(back->patches[51].original, r.patches[51].original);
  EXPECT_EQ(back->patches[51].replacement, r.patches[51].replacement);
  // Without call sites a record stays at the lowest version that holds it.
  EXPECT_LT(version_of(encode_record(sample())), 6u);
}

// A call to a function whose entry patch lies after its kept first
// instruction (jit/patch_plan.h) targets the function's start, a few bytes
// before the patch: version 7, which a dynid that reads only 6 refuses.
TEST(CacheRecord, CallSitesFromAKeptFirstInstructionNeedVersion7) {
  CacheRecord r = sample();
  r.patches.push_back(call_site(0x55d3a1400000, r.patches[4].addr - 3, kCache + 4096 + 4 * 64 - 3));
  std::vector<uint8_t> bytes = encode_record(r);
  EXPECT_EQ(version_of(bytes), 7u);
  auto back = decode_record(bytes, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(count_of(back->patches, PatchKind::CallSite), 1u);
  uint32_t six = 6;
  std::memcpy(bytes.data() + 8, &six, 4);
  uint64_t sum = 14695981039346656037ull;  // FNV-1a, as the record's own checksum
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) sum = (sum ^ bytes[i]) * 1099511628211ull;
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  auto as_six = decode_record(bytes, kCache, kLength);
  ASSERT_FALSE(as_six) << "read as 6, the call site comes from no entry";
  EXPECT_NE(as_six.error().message().find("call site"), std::string::npos) << as_six.error().message();
}

// Undo writes a call site's original bytes back: a record may only name a
// call or jmp rel32 whose original target is one of its entries and whose
// new one lies in the cache, with the same opcode byte.
TEST(CacheRecord, RefusesForgedCallSites) {
  const CacheRecord good = sample();
  const uint64_t entry = good.patches[4].addr, copy = kCache + 4096 + 4 * 64;
  std::vector<PatchRecord> forged = {
      call_site(0x55d3a1400000, entry + 1, copy),                 // from no entry of the record
      call_site(0x55d3a1400000, entry - 49, copy),                // from further before one than kept instructions reach
      call_site(0x55d3a1400000, entry, 0x7f0000000000),           // to outside the cache
      call_site(0x55d3a1400000, entry, copy, 0x90),               // not a call or jmp
      call_site(0x55d3a1400001, entry, copy, 0x85),               // a jcc's second byte: never written
      call_site(entry + 2, entry, copy),                          // over an entry's jump
  };
  PatchRecord changed_op = call_site(0x55d3a1400000, entry, copy);
  changed_op.replacement[0] = 0xe9;  // a call made a jmp
  forged.push_back(changed_op);
  for (const PatchRecord& p : forged) {
    CacheRecord r = good;
    r.patches.push_back(p);
    auto back = decode_record(encode_record(r), kCache, kLength);
    EXPECT_FALSE(back) << "call site with op " << int(p.replacement[0]);
  }
  CacheRecord ok = good;
  ok.patches.push_back(call_site(0x55d3a1400000, entry, copy, 0xe9));
  EXPECT_TRUE(decode_record(encode_record(ok), kCache, kLength));
}

// Other modules' GOT slots re-pointed at the copies (issue 22): version 9,
// read back whole; a record without them stays at a lower version.
TEST(CacheRecord, GotSlotsRoundTripAsVersion9) {
  CacheRecord r = sample();
  r.slots.push_back({0x55d3a2000018, r.patches[4].addr, kCache + 4096 + 4 * 64});
  r.slots.push_back({0x55d3a2000020, r.patches[9].addr - 4, kCache + 4096 + 9 * 64});  // past a kept endbr64
  std::vector<uint8_t> bytes = encode_record(r);
  EXPECT_EQ(version_of(bytes), 9u);
  EXPECT_LE(bytes.size(), record_size(r.patches.size(), 0, r.slots.size()));
  bytes.resize(bytes.size() + 64, 0xcc);
  auto back = decode_record(bytes, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->slots.size(), 2u);
  EXPECT_EQ(back->slots[1].addr, r.slots[1].addr);
  EXPECT_EQ(back->slots[1].original, r.slots[1].original);
  EXPECT_EQ(back->slots[1].replacement, r.slots[1].replacement);
  EXPECT_EQ(back->patches.size(), r.patches.size());
  EXPECT_LT(version_of(encode_record(sample())), 9u);
}

// Undo writes a slot's original value back: a record may only name an
// 8-aligned slot outside the cache, once, that held the start of one of
// its entries and now holds an address in its code.
TEST(CacheRecord, RefusesForgedGotSlots) {
  const CacheRecord good = sample();
  const uint64_t entry = good.patches[4].addr, copy = kCache + 4096 + 4 * 64;
  const std::vector<std::vector<SlotRecord>> forged = {
      {{0x55d3a2000019, entry, copy}},                               // not 8-aligned
      {{kCache + 64, entry, copy}},                                   // in the cache itself
      {{0x55d3a2000018, entry + 1, copy}},                            // from no entry of the record
      {{0x55d3a2000018, 0x7f0000001000, copy}},                       // from an address the record never patched
      {{0x55d3a2000018, entry, kCache + 8}},                          // to the record, not the code
      {{0x55d3a2000018, entry, kCache + 4096 + 600000}},              // past the code
      {{0x55d3a2000018, entry, copy}, {0x55d3a2000018, entry, copy}},  // twice
  };
  for (const auto& slots : forged) {
    CacheRecord r = good;
    r.slots = slots;
    auto back = decode_record(encode_record(r), kCache, kLength);
    ASSERT_FALSE(back) << "slot at " << std::hex << slots[0].addr;
    EXPECT_NE(back.error().message().find("GOT slot"), std::string::npos) << back.error().message();
  }
  CacheRecord ok = good;
  ok.slots = {{0x55d3a2000018, entry, copy}};
  EXPECT_TRUE(decode_record(encode_record(ok), kCache, kLength));
}

// An entry through a pad (jit/entry_pads.h): the pad's jmp into the cache
// (PatchKind::Pad), and the entry's short jump to it, its other 3 bytes the
// file's. Version 10; undo writes both originals back, so a record may name
// a short jump only to one of its own pads, each pad reached once.
PatchRecord short_jump(uint64_t at, uint64_t pad) {
  PatchRecord p;
  p.addr = at;
  p.original = {0x89, 0xe5, 0x85, 0xff, 0x74};  // mov %rsp,%rbp after its REX; test; je
  p.replacement = p.original;
  p.replacement[0] = 0xeb;
  p.replacement[1] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int64_t>(pad) - static_cast<int64_t>(at + 2)));
  return p;
}

CacheRecord with_pad(uint64_t at, uint64_t pad, uint64_t copy) {
  CacheRecord r = sample();
  PatchRecord p = jump_to(pad, copy);
  p.original = {0x0f, 0x1f, 0x44, 0x00, 0x00};  // a nop of the padding
  p.kind = PatchKind::Pad;
  r.patches.push_back(p);
  r.patches.push_back(short_jump(at, pad));
  return r;
}

TEST(CacheRecord, PadsAndShortJumpsRoundTripAsVersion10) {
  const uint64_t at = 0x55d3a1400001, pad = 0x55d3a13ffffb, copy = kCache + 4096 + 3200;
  CacheRecord r = with_pad(at, pad, copy);
  std::vector<uint8_t> bytes = encode_record(r);
  EXPECT_EQ(version_of(bytes), 10u);
  auto back = decode_record(bytes, kCache, kLength);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->patches.size(), r.patches.size());
  EXPECT_EQ(back->patches[50].kind, PatchKind::Pad);
  EXPECT_EQ(back->patches[51].kind, PatchKind::Entry);
  EXPECT_TRUE(is_short_entry(back->patches[51]));
  EXPECT_EQ(short_entry_pad(back->patches[51]), pad);
  EXPECT_EQ(entry_jump_target(back->patches[51], back->patches), copy) << "through the pad";
  EXPECT_EQ(entry_jump_target(back->patches[3], back->patches), kCache + 4096 + 3 * 64);
  EXPECT_EQ(count_of(back->patches, PatchKind::Entry), 51u);
  // Call sites may be re-pointed from an entry through a pad too.
  PatchRecord call = jump_to(0x55d3a1500000, copy);
  call.original = call.replacement;
  const int32_t rel = static_cast<int32_t>(static_cast<int64_t>(at - 1 - (call.addr + 5)));  // the function's start
  std::memcpy(call.original.data() + 1, &rel, 4);
  call.original[0] = call.replacement[0] = 0xe8;
  call.kind = PatchKind::CallSite;
  r.patches.push_back(call);
  EXPECT_TRUE(decode_record(encode_record(r), kCache, kLength));
}

TEST(CacheRecord, RefusesShortJumpsToNoPadOfItsOwn) {
  const uint64_t at = 0x55d3a1400001, pad = 0x55d3a13ffffb, copy = kCache + 4096 + 3200;
  ASSERT_TRUE(decode_record(encode_record(with_pad(at, pad, copy)), kCache, kLength));
  auto refused = [&](CacheRecord r, const std::string& what) {
    auto back = decode_record(encode_record(r), kCache, kLength);
    ASSERT_FALSE(back) << what;
    EXPECT_NE(back.error().message().find("cache record"), std::string::npos) << back.error().message();
  };
  CacheRecord r = with_pad(at, pad, copy);
  r.patches[51] = short_jump(at, pad + 1);
  refused(r, "a short jump to no pad");
  r = with_pad(at, pad, copy);
  r.patches[51].replacement[4] = 0xcc;
  refused(r, "a short jump that changes more than its 2 bytes");
  r = with_pad(at, pad, copy);
  r.patches.push_back(short_jump(at + 0x10, pad));
  refused(r, "a pad reached twice");
  r = with_pad(at, pad, copy);
  r.patches[50] = jump_to(pad, 0x7f0000000000);
  r.patches[50].kind = PatchKind::Pad;
  refused(r, "a pad that jumps outside the cache");
  r = with_pad(at, pad, copy);
  r.patches[50].addr = r.patches[3].addr + 2;
  refused(r, "a pad over another patch");
}

}  // namespace
}  // namespace dyni
