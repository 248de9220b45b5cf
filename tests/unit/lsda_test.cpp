// A copy's LSDA (jit/lsda.h), from hand-built exception tables: call sites
// re-addressed, LPStart never 0, types used only by exception specifications
// kept, and hostile tables (cycles, unsorted or countless sites) refused.
#include "jit/lsda.h"
#include "jit/cache_eh_frame.h"

#include <gtest/gtest.h>

#include <cstring>

namespace dyni::jit {
namespace {

void uleb(std::vector<uint8_t>& out, uint64_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<uint8_t>(b | (v ? 0x80 : 0)));
  } while (v);
}

struct Site {
  uint64_t start, length, pad, action;
};

constexpr uint64_t kFunction = 0x5000, kLsdaAddr = 0x9000, kBias = 0x555500000000;

// An LSDA: LPStart omitted, call sites (uleb128), `actions` bytes, then
// `types` sdata4 pc-relative entries (values: link-time addresses) and
// `specs` bytes after the type table's base.
std::vector<uint8_t> lsda(const std::vector<Site>& sites, const std::vector<uint8_t>& actions,
                          const std::vector<uint64_t>& types, const std::vector<uint8_t>& specs) {
  std::vector<uint8_t> cs;
  for (const Site& s : sites) uleb(cs, s.start), uleb(cs, s.length), uleb(cs, s.pad), uleb(cs, s.action);
  std::vector<uint8_t> body = {0x01};
  uleb(body, cs.size());
  body.insert(body.end(), cs.begin(), cs.end());
  body.insert(body.end(), actions.begin(), actions.end());
  std::vector<uint8_t> out = {0xff, types.empty() ? uint8_t{0xff} : uint8_t{0x9b}};
  std::size_t type_bytes = types.size() * 4;
  if (!types.empty()) uleb(out, body.size() + type_bytes);  // one byte: small tables
  out.insert(out.end(), body.begin(), body.end());
  for (std::size_t i = types.size(); i >= 1; --i) {  // entry 1 just below the base
    int32_t rel = static_cast<int32_t>(static_cast<int64_t>(types[i - 1]) - static_cast<int64_t>(kLsdaAddr + out.size()));
    uint8_t raw[4];
    std::memcpy(raw, &rel, 4);
    out.insert(out.end(), raw, raw + 4);
  }
  out.insert(out.end(), specs.begin(), specs.end());
  return out;
}

// A copy at 0x20000 of a function at kFunction: one instruction per 4 bytes,
// in the original order.
EmittedCode copy_of(std::size_t instructions) {
  EmittedCode code;
  code.base = 0x20000;
  code.bytes.assign(instructions * 4, 0x90);
  for (std::size_t i = 0; i < instructions; ++i)
    code.translation.push_back({code.base + i * 4, kFunction + i * 4, Translation::Copied});
  return code;
}

uint64_t u64_at(const std::vector<uint8_t>& v, std::size_t at) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + at, 8);
  return x;
}

TEST(Lsda, CallSitesFollowTheCopyAndLpStartIsNeverZero) {
  // Two sites: [8, 16) with a pad at +40 and action 1; [16, 24) without pad.
  auto bytes = lsda({{8, 8, 40, 1}, {16, 8, 0, 0}}, {0x01, 0x00}, {0x7000}, {});
  auto out = translate_lsda({bytes, kLsdaAddr, kFunction, kBias}, copy_of(8));
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ((*out)[0], 0x00);  // LPStart: absolute
  uint64_t lpstart = u64_at(*out, 1);
  EXPECT_NE(lpstart, 0u);
  EXPECT_LT(lpstart, kFunction + kBias);
  // Call-site table: starts after the type-table offset (one byte here).
  std::size_t at = 1 + 8 + 1 + 1;
  EXPECT_EQ((*out)[at], 0x01);  // uleb128 call sites
  std::vector<uint8_t> want;
  uleb(want, 8), uleb(want, 8), uleb(want, kFunction + 40 + kBias - lpstart), uleb(want, 1);
  uleb(want, 16), uleb(want, 8), uleb(want, 0), uleb(want, 0);
  EXPECT_EQ((*out)[at + 1], want.size());
  EXPECT_EQ(std::vector<uint8_t>(out->begin() + static_cast<long>(at + 2), out->begin() + static_cast<long>(at + 2 + want.size())), want);
}

// `throw(A)` specifications index the type table too (filter -1: the list
// at the table's base): the entry they use must be written, or the C++
// runtime reads other bytes as a type_info pointer.
TEST(Lsda, TypesUsedOnlyByExceptionSpecificationsAreKept) {
  std::vector<uint8_t> spec_action = {0x7f, 0x00};  // filter -1, no next
  auto bytes = lsda({{0, 16, 40, 1}}, spec_action, {0x7000}, {0x01, 0x00});
  auto out = translate_lsda({bytes, kLsdaAddr, kFunction, kBias}, copy_of(8));
  ASSERT_TRUE(out) << out.error().message();
  // The tail: one 8-byte type entry (0x7000 + bias), then the spec list.
  ASSERT_GE(out->size(), 10u);
  EXPECT_EQ(u64_at(*out, out->size() - 10), 0x7000 + kBias);
  EXPECT_EQ((*out)[out->size() - 2], 0x01);
  EXPECT_EQ((*out)[out->size() - 1], 0x00);
}

TEST(Lsda, RefusesHostileTables) {
  // An action whose "next" points at itself: a cycle.
  auto cycle = lsda({{0, 16, 40, 1}}, {0x01, 0x7f}, {0x7000}, {});
  auto c = translate_lsda({cycle, kLsdaAddr, kFunction, kBias}, copy_of(8));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("loops"), std::string::npos) << c.error().message();
  // Call sites out of order (the personality would stop searching early).
  EXPECT_FALSE(translate_lsda({lsda({{16, 8, 0, 0}, {0, 8, 0, 0}}, {}, {}, {}), kLsdaAddr, kFunction, kBias}, copy_of(8)));
  // More call sites than any real function has.
  std::vector<Site> many;
  for (uint64_t i = 0; i < 30000; ++i) many.push_back({i, 1, 0, 0});
  EXPECT_FALSE(translate_lsda({lsda(many, {}, {}, {}), kLsdaAddr, kFunction, kBias}, copy_of(8)));
  // A spec index past the type table (filter -1 -> list {5}).
  EXPECT_FALSE(translate_lsda({lsda({{0, 16, 40, 1}}, {0x7f, 0x00}, {0x7000}, {0x05, 0x00}), kLsdaAddr, kFunction, kBias},
                              copy_of(8)));
  // Truncated anywhere: refused, never read past the end.
  auto good = lsda({{8, 8, 40, 1}, {16, 8, 0, 0}}, {0x01, 0x00}, {0x7000}, {});
  for (std::size_t n = 0; n < good.size(); ++n)
    (void)translate_lsda({std::span(good).first(n), kLsdaAddr, kFunction, kBias}, copy_of(8));
}

}  // namespace
}  // namespace dyni::jit

namespace dyni::jit {
namespace {

// The unwinder resumes at the original's landing pads, for a copy's frames
// too: a copy whose entry patch would cover one (not at its first byte) has
// no frames that can be written, and is left out (I7).
TEST(Lsda, ALandingPadInsideTheEntryPatchLeavesTheCopyOut) {
  auto bytes = lsda({{8, 8, 3, 0}, {16, 8, 0, 0}, {24, 4, 20, 0}}, {}, {}, {});
  auto pads = landing_pads({bytes, kLsdaAddr, kFunction, kBias});
  ASSERT_TRUE(pads) << pads.error().message();
  EXPECT_EQ(*pads, (std::vector<uint64_t>{kFunction + 3, kFunction + 20})) << "sites without a pad have none";
  EmittedCode code = copy_of(8);
  std::vector<UnwindRow> rows = {{code.base, kFunction, {}}};
  elf::Fde fde;
  fde.begin = kFunction;
  fde.end = kFunction + 32;
  fde.lsda = kLsdaAddr;
  fde.personality = 0x4000;
  UnwindSources sources{{}, bytes, kLsdaAddr, 0};
  for (uint64_t patch : {uint64_t{0}, kFunction + 3, kFunction + 4, kFunction + 1, kFunction + 16}) {
    CopyFrames copy{&code, &rows, &fde, patch};
    auto blob = write_cache_eh_frame({&copy, 1}, sources, 0x30000);
    const bool covers = patch && ((kFunction + 3 > patch && kFunction + 3 < patch + 5) ||
                                  (kFunction + 20 > patch && kFunction + 20 < patch + 5));
    EXPECT_EQ(blob.has_value(), !covers) << std::hex << patch << ": " << (blob ? "" : blob.error().message());
    if (!blob) {
      EXPECT_NE(blob.error().message().find("in the entry bytes"), std::string::npos) << blob.error().message();
    }
  }
}

}  // namespace
}  // namespace dyni::jit
