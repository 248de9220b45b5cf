// The XSAVE area of remote_syscall's signal frame (dynid/xsave_frame.h),
// over XSAVE layouts recorded from CPUID leaf 0xD of several CPUs: the frame
// must have the size and features the kernel gives that thread's own frames.
#include "dynid/xsave_frame.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>
#include <initializer_list>

namespace dyni {
namespace {

struct Placed {
  int bit;
  uint32_t offset, size;
};

XsaveLayout layout_of(std::initializer_list<Placed> components) {
  XsaveLayout layout;
  for (const Placed& p : components) layout.components[static_cast<std::size_t>(p.bit)] = {p.offset, p.size};
  return layout;
}

// CPUID 0xD sub-leaves 2.. (EBX offset, EAX size, ECX bit 2 XFD), recorded.
const XsaveLayout kAvx2Only = layout_of({{2, 576, 256}});                    // Intel Haswell: XCR0 0x7
const XsaveLayout kZen3 = layout_of({{2, 576, 256}, {9, 2432, 8}});          // AMD EPYC (this project's KVM machine): 0x207
const XsaveLayout kZen4 = layout_of({{2, 576, 256}, {5, 832, 64}, {6, 896, 512}, {7, 1408, 1024}, {9, 2432, 8}});
const XsaveLayout kSapphireRapids = layout_of({{2, 576, 256}, {5, 1088, 64}, {6, 1152, 512}, {7, 1664, 1024},
                                               {9, 2688, 8}, {17, 2752, 64}, {18, 2816, 8192}});

struct Case {
  const char* cpu;
  const XsaveLayout* layout;
  uint64_t xcr0, xstate_bv;
  uint64_t features;
  uint32_t size, max_size;
};

TEST(FrameXstate, MatchesTheKernelsOwnFrameOnEachCpu) {
  const Case cases[] = {
      {"AVX2 only", &kAvx2Only, 0x7, 0x7, 0x7, 832, 832},
      {"Zen 3, PKRU", &kZen3, 0x207, 0x203, 0x207, 2440, 2440},
      {"Zen 4, AVX-512", &kZen4, 0x2e7, 0x2e7, 0x2e7, 2440, 2440},
      {"Zen 4, vector state in init", &kZen4, 0x2e7, 0x3, 0x2e7, 2440, 2440},
      // Measured on that CPU (kernel 6.18): a thread without AMX gets
      // xstate_size 2816 and xfeatures 0x202e7 in its own signal frames.
      {"Sapphire Rapids, no AMX in use", &kSapphireRapids, 0x602e7, 0x2a3, 0x202e7, 2816, 11008},
      {"Sapphire Rapids, tile config set", &kSapphireRapids, 0x602e7, 0x202a3, 0x202e7, 2816, 11008},
      {"Sapphire Rapids, AMX tiles in use", &kSapphireRapids, 0x602e7, 0x602a3, 0x602e7, 11008, 11008},
  };
  for (const Case& c : cases) {
    auto frame = frame_xstate(*c.layout, c.xcr0, c.xstate_bv);
    ASSERT_TRUE(frame) << c.cpu << ": " << frame.error().message();
    EXPECT_EQ(frame->features, c.features) << c.cpu;
    EXPECT_EQ(frame->size, c.size) << c.cpu;
    EXPECT_EQ(frame->max_size, c.max_size) << c.cpu;
  }
}

TEST(FrameXstate, RefusesFeaturesItCannotPlace) {
  EXPECT_FALSE(frame_xstate(kZen3, 0x204, 0x204));  // no x87/SSE
  EXPECT_FALSE(frame_xstate(kAvx2Only, 0x207, 0x7));  // PKRU enabled, but the layout does not place it
}

// A buffer as PTRACE_GETREGSET NT_X86_XSTATE returns it: the maximum size,
// XCR0 in the first software bytes, XSTATE_BV in the header.
// A buffer shorter than the XSAVE header is cut from a whole one (the header
// fields must not be written past its end).
std::vector<uint8_t> ptrace_buffer(uint32_t size, uint64_t xcr0, uint64_t xstate_bv) {
  std::vector<uint8_t> x(std::max<uint32_t>(size, 576));
  for (uint32_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7 + 1);
  std::memcpy(x.data() + 464, &xcr0, 8);
  std::memcpy(x.data() + 512, &xstate_bv, 8);
  std::memset(x.data() + 520, 0, 56);
  x.resize(size);
  return x;
}

uint64_t u64_at(const std::vector<uint8_t>& v, std::size_t at) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + at, 8);
  return x;
}
uint32_t u32_at(const std::vector<uint8_t>& v, std::size_t at) {
  uint32_t x = 0;
  std::memcpy(&x, v.data() + at, 4);
  return x;
}

TEST(SigframeXstate, CutsPtracesMaximumBufferToTheThreadsFrame) {
  auto buf = ptrace_buffer(11008, 0x602e7, 0x2a3);
  auto area = sigframe_xstate(kSapphireRapids, buf);
  ASSERT_TRUE(area) << area.error().message();
  // MAGIC2 also at the maximum user size: kernels 6.15 until the revert of
  // dc8aa31a7ac2 look for it at the thread's own user_size, the maximum for a
  // thread whose tiles were used once and then released.
  ASSERT_EQ(area->size(), 11008u + 4);
  EXPECT_EQ(u32_at(*area, 11008), 0x46505845u);
  EXPECT_EQ(u64_at(*area, 5000), 0u);          // zeros between
  EXPECT_EQ(u32_at(*area, 464), 0x46505853u);  // magic1
  EXPECT_EQ(u32_at(*area, 468), 11008u + 4);   // extended_size: the whole area
  EXPECT_EQ(u64_at(*area, 472), 0x202e7u);     // xfeatures
  EXPECT_EQ(u32_at(*area, 480), 2816u);        // xstate_size
  EXPECT_EQ(u64_at(*area, 512), 0x2a3u);       // XSTATE_BV
  EXPECT_EQ(u32_at(*area, 2816), 0x46505845u); // magic2 right after the area
  EXPECT_EQ(std::memcmp(area->data(), buf.data(), 464), 0);             // x87/SSE state
  EXPECT_EQ(std::memcmp(area->data() + 576, buf.data() + 576, 2816 - 576), 0);  // AVX .. tile config
}

TEST(SigframeXstate, KeepsTilesInUseAndClearsHeaderBytesXrstorRejects) {
  auto buf = ptrace_buffer(11008, 0x602e7, 0x602a3);
  uint64_t junk = 0x8000000000000001ULL;  // XCOMP_BV / reserved: #GP in XRSTOR
  std::memcpy(buf.data() + 520, &junk, 8);
  std::memcpy(buf.data() + 560, &junk, 8);
  auto area = sigframe_xstate(kSapphireRapids, buf);
  ASSERT_TRUE(area) << area.error().message();
  ASSERT_EQ(area->size(), 11008u + 4);
  EXPECT_EQ(u64_at(*area, 512), 0x602a3u);
  for (std::size_t at = 520; at < 576; at += 8) EXPECT_EQ(u64_at(*area, at), 0u) << at;
  EXPECT_EQ(area->at(10000), buf.at(10000));  // tile data copied
}

// With SSE and AVX in their init state MXCSR can only be 0x1F80; kernels
// before 5.13 leave it 0 in ptrace's buffer, and XRSTOR would load that
// (every SSE exception unmasked: SIGFPE). Otherwise it is the thread's.
TEST(SigframeXstate, MxcsrIsTheDefaultWhenSseAndAvxAreInInitState) {
  auto buf = ptrace_buffer(2440, 0x207, 0x201);
  uint32_t zero = 0, custom = 0x9fc0;
  std::memcpy(buf.data() + 24, &zero, 4);
  auto area = sigframe_xstate(kZen3, buf);
  ASSERT_TRUE(area) << area.error().message();
  EXPECT_EQ(u32_at(*area, 24), 0x1f80u);
  auto in_use = ptrace_buffer(2440, 0x207, 0x203);
  std::memcpy(in_use.data() + 24, &custom, 4);
  auto kept = sigframe_xstate(kZen3, in_use);
  ASSERT_TRUE(kept);
  EXPECT_EQ(u32_at(*kept, 24), 0x9fc0u);
}

TEST(SigframeXstate, RefusesStateItCannotRestoreWhole) {
  EXPECT_FALSE(sigframe_xstate(kZen3, ptrace_buffer(500, 0x207, 0x3)));     // shorter than an XSAVE area
  EXPECT_FALSE(sigframe_xstate(kZen3, ptrace_buffer(1000, 0x207, 0x3)));    // PKRU lies past the buffer
  EXPECT_FALSE(sigframe_xstate(kZen3, ptrace_buffer(2440, 0x207, 0x8003)));  // XSTATE_BV outside XCR0
  EXPECT_FALSE(sigframe_xstate(kZen3, ptrace_buffer(2440, 0x204, 0x4)));    // no x87/SSE
}

TEST(HostXsaveLayout, PlacesAvxWhereEveryCpuDoes) {
  if (!__builtin_cpu_supports("avx")) GTEST_SKIP() << "this CPU has no AVX";
  XsaveLayout host = host_xsave_layout();
  EXPECT_EQ(host.components[2].offset, 576u);
  EXPECT_EQ(host.components[2].size, 256u);
}

}  // namespace
}  // namespace dyni
