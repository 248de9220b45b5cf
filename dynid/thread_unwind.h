// The call stack of a held thread, read with libunwind-ptrace: its PC, then
// each return address, through signal frames (DESIGN.md §7: a thread inside a
// handler has its interrupted PC in the signal frame on its stack). What the
// checks before a patch (I4), before running code in a thread, and before a
// cache is freed (I8) stand on.
//
// An unwind that ends anywhere but the stack's outermost frame, or that
// passed through a frame without unwind information (a JIT's code, or dyni's
// cache before libunwind is given its rows: libunwind then guesses from the
// frame pointer, and may even report the stack's end), is reported
// incomplete: such a stack proves nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

struct StackFrame {
  uint64_t pc = 0;             // the thread's PC, then return addresses
  bool signal_frame = false;   // this frame is a signal handler's return to rt_sigreturn
};

struct ThreadStack {
  std::vector<StackFrame> frames;
  bool complete = false;       // unwound to the outermost frame
  std::string incomplete_why;  // when not
};

// Code whose unwind information no file in /proc/PID/maps holds: dyni's
// cache. libunwind-ptrace finds a PC's frame only through the files mapped
// at it, so the cache's frames are found through their .eh_frame_hdr-style
// search table (cache_eh_frame.h), which the cache carries in the target's
// memory (cache_record.h).
struct UnwindTable {
  uint64_t code_lo = 0, code_hi = 0;  // run-time
  uint64_t table_addr = 0;            // run-time; pairs of int32 relative to segbase
  uint64_t entries = 0;
  uint64_t segbase = 0;               // 0: table_addr (an .eh_frame_hdr's own start otherwise)
};

// glibc's clone and clone3 end their FDE before their syscall, so a thread
// on the instructions after it has no unwind information at its PC
// (thread_unwind.cpp says what they are). Where `pc` stands in them, given
// `code` read from `code_addr` (at least the 40 bytes before pc and 16
// after) and the thread's rax: the new thread's first frame (Child), the
// parent's with its return address at [rsp] (Parent), or neither (No).
enum class CloneExit { No, Child, Parent };
CloneExit clone_exit_at(const std::vector<uint8_t>& code, uint64_t code_addr, uint64_t pc, uint64_t rax);

// Unwinds threads of one process; keeps libunwind's caches between threads.
// Every thread passed must be held (ptrace-stopped) by the caller. Memory is
// read a page at a time during one unwind() (never cached across calls).
// One thread at a time per reader.
class StackReader {
 public:
  explicit StackReader(pid_t pid, std::vector<UnwindTable> tables = {});
  ~StackReader();
  StackReader(const StackReader&) = delete;
  StackReader& operator=(const StackReader&) = delete;

  Result<ThreadStack> unwind(pid_t tid, std::size_t max_frames = 512) const;

 private:
  struct Space;
  std::unique_ptr<Space> space_;
};

}  // namespace dyni
