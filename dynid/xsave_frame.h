// The XSAVE area of a signal frame, built exactly as the kernel would build
// one for a given thread on this CPU (remote_syscall's rt_sigframe).
//
// Why it matters: rt_sigreturn restores the vector state from the frame only
// when the frame's software bytes (struct _fpx_sw_bytes) pass the kernel's
// check_xstate_in_sigframe(): magic1, xstate_size no larger than the thread's
// fpstate->user_size, extended_size >= xstate_size, and FP_XSTATE_MAGIC2 at
// fpstate + xstate_size. A frame that fails falls back to FXRSTOR, which
// clears AVX, AVX-512 and PKRU state; one that is too short makes XRSTOR read
// stack bytes as state. PTRACE_GETREGSET NT_X86_XSTATE returns the kernel's
// *maximum* user buffer (AMX tile data included), which is larger than
// user_size for every thread that never used AMX: so the frame is sized from
// CPUID leaf 0xD and the thread's own state, not from ptrace's length.
//
// The rule (arch/x86/kernel/fpu/signal.c and xstate.c, kernels 4.x to 6.18):
//  - features = the user features (XCR0 as ptrace reports it) minus AMX tile
//    data (the kernel's only dynamically enabled feature,
//    XFEATURE_MASK_USER_DYNAMIC) when the thread's XSTATE_BV shows it unused.
//    A thread with tiles in use has had its fpstate enlarged (user_size =
//    maximum), so it gets them; any other thread gets the default features,
//    whose size is the default user_size.
//  - size = the end of the highest included component in the standard
//    (non-compacted) format: offset + size from CPUID 0xD sub-leaf i.
//  - MAGIC2 at that size, and also at the maximum user size when that is
//    larger (zeros between): kernels 6.15 until its revert (commit dc8aa31a7ac2)
//    look for MAGIC2 at fpstate + the thread's *own* user_size, which is the
//    maximum for a thread that used tiles once and has since released them.
//  - the header's XSTATE_BV is the thread's, limited to those features;
//    XCOMP_BV and the reserved header bytes are zero (XRSTOR faults otherwise).
//  - MXCSR is 0x1F80 when XSTATE_BV has neither SSE nor AVX: that is the only
//    value it can have then, XRSTOR loads it regardless, and kernels before
//    5.13 leave it unset (0, every exception unmasked) in ptrace's buffer.
// On restore the kernel XRSTORs `features & user_xfeatures` and puts every
// other user feature in its init state, which is where an excluded tile
// state already was.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.h"

namespace dyni {

// Standard-format placement of one XSAVE state component (CPUID 0xD, i >= 2).
struct XsaveComponent {
  uint32_t offset = 0, size = 0;
};

// The CPU's XSAVE layout: what CPUID leaf 0xD says for each component.
struct XsaveLayout {
  std::array<XsaveComponent, 64> components{};
};

// This CPU's layout, read with CPUID (dynid runs on the target's CPU).
XsaveLayout host_xsave_layout();

// What the signal frame carries for a thread: its features and size.
struct FrameXstate {
  uint64_t features = 0;
  uint32_t size = 0;      // xstate_size in the software bytes
  uint32_t max_size = 0;  // the maximum user size: a second MAGIC2 goes there
};

// The features and size of the frame for a thread whose ptrace buffer reports
// user features `xcr0` and state bits `xstate_bv`. Fails on a feature set it
// does not understand (no x87/SSE, a component the layout does not place).
Result<FrameXstate> frame_xstate(const XsaveLayout& layout, uint64_t xcr0, uint64_t xstate_bv);

// The XSAVE area for a signal frame, from a thread's NT_X86_XSTATE buffer:
// the first `size` bytes, header fixed, software bytes filled in, MAGIC2
// after them and after `max_size` (so max_size + 4 bytes). Fails, with the
// reason, where the thread's state cannot be restored whole.
Result<std::vector<uint8_t>> sigframe_xstate(const XsaveLayout& layout, const std::vector<uint8_t>& ptrace_xstate);

}  // namespace dyni
