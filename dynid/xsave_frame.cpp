// The XSAVE area of a signal frame, sized from CPUID and the thread's state.
#include "dynid/xsave_frame.h"

#include <cpuid.h>

#include <bit>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

namespace dyni {
namespace {

// Offsets inside an XSAVE area (Intel SDM vol. 1, 13.4): 512 legacy bytes
// whose bytes 464..511 are left to software, then the 64-byte header.
constexpr std::size_t kSwBytesOffset = 464, kHeaderOffset = 512, kLegacyAndHeader = 576;
constexpr uint64_t kFpSse = 0x3;                    // x87 and SSE: always present
constexpr uint64_t kSseAvx = 0x6;                   // the components XRSTOR loads MXCSR for
constexpr std::size_t kMxcsrOffset = 24;
constexpr uint32_t kMxcsrDefault = 0x1f80;
constexpr uint64_t kAmxTileData = uint64_t{1} << 18;  // the kernel's XFEATURE_MASK_USER_DYNAMIC
constexpr uint32_t kXstateMagic1 = 0x46505853, kXstateMagic2 = 0x46505845;

// struct _fpx_sw_bytes (uapi asm/sigcontext.h).
struct FxSwBytes {
  uint32_t magic1, extended_size;
  uint64_t xfeatures;
  uint32_t xstate_size, padding[7];
};
static_assert(sizeof(FxSwBytes) == 48 && offsetof(FxSwBytes, xstate_size) == 16);

uint64_t u64_at(const std::vector<uint8_t>& v, std::size_t at) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + at, 8);
  return x;
}


}  // namespace

XsaveLayout host_xsave_layout() {
  XsaveLayout layout;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 0xd) return layout;
  for (unsigned i = 2; i < 64; ++i) {
    __cpuid_count(0xd, i, a, b, c, d);
    layout.components[i] = XsaveComponent{b, a};
  }
  return layout;
}

Result<FrameXstate> frame_xstate(const XsaveLayout& layout, uint64_t xcr0, uint64_t xstate_bv) {
  if ((xcr0 & kFpSse) != kFpSse) return fail(fmt::format("XSAVE features {:#x} lack x87/SSE state", xcr0));
  FrameXstate frame{xcr0, static_cast<uint32_t>(kLegacyAndHeader), static_cast<uint32_t>(kLegacyAndHeader)};
  for (int i = 2; i < 64; ++i) {
    uint64_t bit = uint64_t{1} << i;
    if (!(xcr0 & bit)) continue;
    const XsaveComponent& c = layout.components[static_cast<std::size_t>(i)];
    // A user component the CPU does not place in the standard format (offset
    // 0) is one this code does not understand.
    if (c.size == 0 || c.offset < kLegacyAndHeader)
      return fail(fmt::format("XSAVE component {} has no standard-format place (offset {}, size {})", i, c.offset,
                              c.size));
    frame.max_size = std::max(frame.max_size, c.offset + c.size);
    if ((bit & kAmxTileData) && !(xstate_bv & bit)) {
      frame.features &= ~bit;  // unused, so in its init state: restored as init
      continue;
    }
    frame.size = std::max(frame.size, c.offset + c.size);
  }
  return frame;
}

Result<std::vector<uint8_t>> sigframe_xstate(const XsaveLayout& layout, const std::vector<uint8_t>& ptrace_xstate) {
  if (ptrace_xstate.size() < kLegacyAndHeader) return fail("the thread's XSAVE buffer is shorter than an XSAVE area");
  uint64_t xcr0 = u64_at(ptrace_xstate, kSwBytesOffset);  // ptrace puts the user features here
  uint64_t xstate_bv = u64_at(ptrace_xstate, kHeaderOffset);
  if (xstate_bv & ~xcr0)
    return fail(fmt::format("the thread's XSTATE_BV {:#x} has features outside {:#x}", xstate_bv, xcr0));
  auto frame = frame_xstate(layout, xcr0, xstate_bv);
  if (!frame) return std::unexpected(frame.error());
  if (frame->size > ptrace_xstate.size())
    return fail(fmt::format("the thread's XSAVE buffer ({} bytes) lacks state up to byte {}", ptrace_xstate.size(),
                            frame->size));

  std::vector<uint8_t> area(ptrace_xstate.begin(), ptrace_xstate.begin() + frame->size);
  area.resize(frame->max_size + 4, 0);
  // Header: XSTATE_BV limited to the frame's features; XCOMP_BV (standard
  // format) and the reserved bytes zero, or XRSTOR raises #GP and the
  // thread's rt_sigreturn ends in SIGSEGV.
  uint64_t bv = xstate_bv & frame->features;
  std::memset(area.data() + kHeaderOffset, 0, 64);
  std::memcpy(area.data() + kHeaderOffset, &bv, 8);
  FxSwBytes sw{};
  sw.magic1 = kXstateMagic1;
  sw.xstate_size = frame->size;
  sw.extended_size = frame->max_size + 4;  // the whole area, both MAGIC2 included
  sw.xfeatures = frame->features;
  std::memcpy(area.data() + kSwBytesOffset, &sw, sizeof sw);
  std::memcpy(area.data() + frame->size, &kXstateMagic2, 4);
  std::memcpy(area.data() + frame->max_size, &kXstateMagic2, 4);
  if (!(bv & kSseAvx)) std::memcpy(area.data() + kMxcsrOffset, &kMxcsrDefault, 4);
  return area;
}

}  // namespace dyni
