// A held thread's call stack through libunwind-ptrace.
#include "dynid/thread_unwind.h"

#include "dynid/module_unwind.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"

#include <libunwind-ptrace.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>

// Exported by libunwind, not declared in its headers: the binary search of a
// remote .eh_frame_hdr table that _UPT_find_proc_info itself uses.
extern "C" int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t, unw_word_t, unw_dyn_info_t*, unw_proc_info_t*,
                                                  int, void*);

namespace dyni {
namespace {

// What the accessors need beyond libunwind-ptrace's argument, by address
// space: libunwind hands them the address space, and the ptrace state as
// their argument.
struct SpaceState {
  std::vector<UnwindTable> tables;
  WindowMemory* memory = nullptr;  // during an unwind: the thread is held
  // During an unwind that starts in the caller of the thread's frame 0
  // (at_clone_exit): its rip and rsp.
  std::optional<std::pair<uint64_t, uint64_t>> start;
};
std::mutex spaces_mutex;
std::map<unw_addr_space_t, SpaceState> spaces;

int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t* pi, int need_unwind_info, void* arg) {
  std::optional<UnwindTable> table;
  {
    std::lock_guard lock(spaces_mutex);
    auto it = spaces.find(as);
    if (it != spaces.end())
      for (const UnwindTable& t : it->second.tables)
        if (ip >= t.code_lo && ip < t.code_hi) table = t;
  }
  if (!table) return _UPT_find_proc_info(as, ip, pi, need_unwind_info, arg);
  unw_dyn_info_t di{};
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = table->code_lo;
  di.end_ip = table->code_hi;
  di.u.rti.segbase = table->segbase ? table->segbase : table->table_addr;
  di.u.rti.table_data = table->table_addr;
  di.u.rti.table_len = table->entries * 8 / sizeof(unw_word_t);  // in words: entries are 8 bytes
  return _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, need_unwind_info, arg);
}

int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t* val, int write, void* arg) {
  if (!write) {
    WindowMemory* memory = nullptr;
    {
      std::lock_guard lock(spaces_mutex);
      auto it = spaces.find(as);
      if (it != spaces.end()) memory = it->second.memory;  // this unwind's, on this thread
    }
    // Pages read once per unwind instead of a PTRACE_PEEKDATA per word: an
    // unwind reads hundreds of words (mariadbd's 15 threads: 37-45 ms, then 15).
    if (memory)
      if (auto word = memory->read(addr, sizeof *val); word && word->size() == sizeof *val) {
        std::memcpy(val, word->data(), sizeof *val);
        return 0;
      }
  }
  return _UPT_access_mem(as, addr, val, write, arg);
}

int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t* val, int write, void* arg) {
  if (!write && (reg == UNW_X86_64_RIP || reg == UNW_X86_64_RSP)) {
    std::optional<std::pair<uint64_t, uint64_t>> start;
    {
      std::lock_guard lock(spaces_mutex);
      auto it = spaces.find(as);
      if (it != spaces.end()) start = it->second.start;
    }
    if (start) {
      *val = reg == UNW_X86_64_RIP ? start->first : start->second;
      return 0;
    }
  }
  return _UPT_access_reg(as, reg, val, write, arg);
}

void set_space(unw_addr_space_t as, WindowMemory* memory, std::optional<std::pair<uint64_t, uint64_t>> start) {
  std::lock_guard lock(spaces_mutex);
  spaces[as].memory = memory;
  spaces[as].start = start;
}

// glibc's clone and clone3 end their FDE just before `syscall` (in the new
// thread the frame would be wrong), so a thread held on the few
// instructions after it has no unwind information at its PC, and thread
// storms hold one there in nearly every window. Those instructions are
// exactly
//     mov $NR,%eax; syscall; test %rax,%rax; jl error; jz child; ret
//   child: xor %ebp,%ebp; [and $-16,%rsp | pop %rax | pop %rdi | mov %r8,%rdi]...; call *%reg
// with nothing pushed since the entry. In the parent (rax not 0 up to the
// ret) the return address is at [rsp]; in the new thread (rax 0 up to the
// jz, then the child path up to its call) the stack begins there
// (thread_start marks the outermost frame). The whole sequence is matched,
// NR included (clone or clone3), before a PC is placed in it.

// The length of one child-path instruction at `b` (glibc's shapes), or 0.
std::size_t child_step(const uint8_t* b, std::size_t left, bool& is_call) {
  is_call = left >= 2 && b[0] == 0xff && (b[1] & 0xf8) == 0xd0;  // call *%reg
  if (is_call) return 2;
  if (left >= 2 && b[0] == 0x31 && b[1] == 0xed) return 2;                                    // xor %ebp,%ebp
  if (left >= 4 && b[0] == 0x48 && b[1] == 0x83 && b[2] == 0xe4) return 4;                    // and $imm8,%rsp
  if (left >= 3 && b[0] == 0x4c && b[1] == 0x89 && b[2] == 0xc7) return 3;                    // mov %r8,%rdi
  if (left >= 1 && (b[0] == 0x58 || b[0] == 0x5f)) return 1;                                  // pop %rax / %rdi
  return 0;
}

// Where PC `pc` stands in a clone exit sequence whose syscall is at `b + s`
// (b holds the code from `base`).
CloneExit place_in_clone_exit(const std::vector<uint8_t>& b, uint64_t base, std::size_t s, uint64_t pc, uint64_t rax) {
  auto at = [&](std::size_t i) { return i < b.size() ? b[i] : uint8_t{0}; };
  uint32_t nr = 0;
  if (s < 5 || at(s - 5) != 0xb8) return CloneExit::No;
  std::memcpy(&nr, &b[s - 4], 4);
  if ((nr != SYS_clone && nr != SYS_clone3) || at(s) != 0x0f || at(s + 1) != 0x05) return CloneExit::No;
  if (at(s + 2) != 0x48 || at(s + 3) != 0x85 || at(s + 4) != 0xc0) return CloneExit::No;  // test %rax,%rax
  std::size_t jl = s + 5, jz = 0, ret = 0;
  if (at(jl) == 0x7c) jz = jl + 2;
  else if (at(jl) == 0x0f && at(jl + 1) == 0x8c) jz = jl + 6;
  else return CloneExit::No;
  if (at(jz) != 0x74 || at(jz + 1) != 0x01 || at(jz + 2) != 0xc3) return CloneExit::No;  // jz over the ret
  ret = jz + 2;
  const uint64_t off = pc - base;
  // Up to the jz, rax 0 is the new thread; anything else the parent: a
  // child's pid, an error, or -ENOSYS while the syscall has not returned (a
  // parent held at its PTRACE_EVENT_CLONE stop). Nothing is pushed either way.
  if (off == s + 2 || off == jl || off == jz) return rax == 0 ? CloneExit::Child : CloneExit::Parent;
  if (off == ret) return CloneExit::Parent;
  bool is_call = false;
  for (std::size_t i = ret + 1; i < b.size();) {
    std::size_t n = child_step(&b[i], b.size() - i, is_call);
    if (n == 0) return CloneExit::No;
    if (off == i) return CloneExit::Child;
    if (is_call) return CloneExit::No;
    i += n;
  }
  return CloneExit::No;
}

// The syscall lies less than 40 bytes before the PC (the child path's
// call, the farthest, 2 + 3 + 6 + 2 + 1 + 9 bytes after it).
constexpr uint64_t kCloneBack = 40, kCloneAhead = 16;

CloneExit at_clone_exit(WindowMemory& memory, const user_regs_struct& regs) {
  if (regs.rip < kCloneBack) return CloneExit::No;
  auto code = memory.read(regs.rip - kCloneBack, kCloneBack + kCloneAhead);
  return code ? clone_exit_at(*code, regs.rip - kCloneBack, regs.rip, regs.rax) : CloneExit::No;
}

}  // namespace

CloneExit clone_exit_at(const std::vector<uint8_t>& code, uint64_t code_addr, uint64_t pc, uint64_t rax) {
  if (pc < code_addr || pc - code_addr > code.size()) return CloneExit::No;
  for (std::size_t s = 5; s + 2 <= pc - code_addr; ++s)
    if (CloneExit e = place_in_clone_exit(code, code_addr, s, pc, rax); e != CloneExit::No) return e;
  return CloneExit::No;
}

struct StackReader::Space {
  pid_t pid = 0;
  unw_addr_space_t as = nullptr;
  unw_accessors_t accessors{};
};

StackReader::StackReader(pid_t pid, std::vector<UnwindTable> tables) : space_(std::make_unique<Space>()) {
  space_->accessors = _UPT_accessors;
  space_->accessors.find_proc_info = find_proc_info;
  space_->accessors.access_mem = access_mem;
  space_->accessors.access_reg = access_reg;
  space_->as = unw_create_addr_space(&space_->accessors, 0);
  if (!space_->as) return;
  unw_set_caching_policy(space_->as, UNW_CACHE_GLOBAL);
  space_->pid = pid;
  // The threads are held: the maps read now stay true for every unwind.
  if (auto maps = profiler::read_maps(pid)) {
    WindowMemory memory(pid);
    std::vector<UnwindTable> modules = module_unwind_tables(*maps, memory);
    tables.insert(tables.end(), modules.begin(), modules.end());
  }
  std::lock_guard lock(spaces_mutex);
  spaces[space_->as].tables = std::move(tables);
}

StackReader::~StackReader() {
  if (!space_->as) return;
  {
    std::lock_guard lock(spaces_mutex);
    spaces.erase(space_->as);
  }
  unw_destroy_addr_space(space_->as);
}

Result<ThreadStack> StackReader::unwind(pid_t tid, std::size_t max_frames) const {
  if (!space_->as) return fail("libunwind: no address space");
  void* upt = _UPT_create(tid);
  if (!upt) return fail(fmt::format("libunwind: cannot read thread {}", tid));
  ThreadStack stack;
  WindowMemory memory(space_->pid);  // falls back to ptrace reads where it cannot read
  user_regs_struct regs{};
  CloneExit clone = ::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 ? at_clone_exit(memory, regs) : CloneExit::No;
  if (clone == CloneExit::Child) {
    _UPT_destroy(upt);
    return ThreadStack{{{regs.rip, false}}, true, ""};
  }
  std::optional<std::pair<uint64_t, uint64_t>> start;
  if (clone == CloneExit::Parent) {
    auto ret = memory.read(regs.rsp, 8);
    if (ret) {
      uint64_t caller = 0;
      std::memcpy(&caller, ret->data(), 8);
      stack.frames.push_back({regs.rip, false});
      start = std::pair{caller, regs.rsp + 8};
    }
  }
  set_space(space_->as, &memory, start);
  struct Unset {  // `memory` dies with this call: no accessor may see it after
    unw_addr_space_t as;
    ~Unset() { set_space(as, nullptr, std::nullopt); }
  } unset{space_->as};
  unw_cursor_t cursor;
  int r = unw_init_remote(&cursor, space_->as, upt);
  if (r < 0) stack.incomplete_why = fmt::format("unw_init_remote: {}", unw_strerror(r));
  uint64_t guessed = 0;  // a frame stepped from without unwind information
  while (r >= 0 && stack.frames.size() < max_frames) {
    unw_word_t ip = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    bool signal = unw_is_signal_frame(&cursor) > 0;
    stack.frames.push_back({static_cast<uint64_t>(ip), signal});
    // Without CFI, libunwind guesses the caller from the frame pointer, and
    // may end the stack there (unw_step returns 0) where it does not end.
    // (For a PC without DWARF info, x86-64 libunwind's unw_get_proc_info
    // still succeeds, with a made-up range of one byte.)
    unw_proc_info_t info{};
    if (!guessed && !signal && (unw_get_proc_info(&cursor, &info) < 0 || info.end_ip <= info.start_ip + 1)) guessed = ip;
    r = unw_step(&cursor);
    if (r == 0) stack.complete = guessed == 0;
    if (r <= 0) break;
  }
  if (r == 0 && guessed)
    stack.incomplete_why = fmt::format("no unwind information at {:#x}: the rest of the stack is a guess", guessed);
  if (r < 0 && stack.incomplete_why.empty())
    stack.incomplete_why = fmt::format("no unwind information past {:#x} ({})",
                                       stack.frames.empty() ? 0 : stack.frames.back().pc, unw_strerror(r));
  if (r > 0) stack.incomplete_why = fmt::format("more than {} frames", max_frames);
  _UPT_destroy(upt);
  return stack;
}

}  // namespace dyni
