// Call stacks of held threads of a real target (dynid/thread_unwind.h): each
// thread unwinds to its outermost frame, through the right functions, and a
// thread inside a signal handler on an alternate stack unwinds through the
// signal frame back to the code it interrupted.
#include "dynid/thread_unwind.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/auxv.h>
#include <sys/syscall.h>

#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdlib>

#include "dynid/module_unwind.h"
#include "dynid/world_stop.h"
#include "elf/function_table.h"
#include "profiler/process_maps.h"
#include "tests/integration/stoppable_target.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using namespace std::chrono_literals;

// Names of the target's own functions on a stack (others: "").
class TargetSymbols {
 public:
  explicit TargetSymbols(pid_t pid) {
    char real[PATH_MAX];
    if (!::realpath(DYNI_TEST_STOPPABLE, real)) return;
    auto file = elf::ElfFile::open(real);
    auto maps = profiler::read_maps(pid);
    if (!file || !maps) return;
    auto t = elf::FunctionTable::build(*file);
    if (!t) return;
    table_ = std::make_unique<elf::FunctionTable>(std::move(*t));
    for (const auto& m : *maps)
      if (m.path == real && m.offset == 0) bias_ = m.start;  // a PIE linked at 0
  }
  std::string name(uint64_t pc) const {
    const elf::Function* f = table_ ? table_->find(pc - 1 - bias_) : nullptr;  // pc - 1: inside the call
    return f ? f->name : "";
  }
  bool on_stack(const ThreadStack& s, const std::string& part) const {
    for (const StackFrame& f : s.frames)
      if (name(f.pc).find(part) != std::string::npos) return true;
    return false;
  }

 private:
  std::unique_ptr<elf::FunctionTable> table_;
  uint64_t bias_ = 0;
};

std::string comm_of(pid_t pid, pid_t tid) {
  auto c = read_file(fmt::format("/proc/{}/task/{}/comm", pid, tid));
  return c ? c->substr(0, c->find('\n')) : "";
}

using ThreadUnwindTest = test::PtraceTest;

TEST_F(ThreadUnwindTest, EveryHeldThreadUnwindsThroughItsOwnFunctions) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);
  TargetSymbols symbols(target.pid());
  auto w = WorldStop::stop(target.pid(), 1000ms);
  ASSERT_TRUE(w) << w.error().message();
  StackReader reader(target.pid());
  auto t0 = std::chrono::steady_clock::now();
  std::size_t frames = 0;
  for (const auto& [tid, t] : w->threads()) {
    auto stack = reader.unwind(tid);
    ASSERT_TRUE(stack) << stack.error().message();
    frames += stack->frames.size();
    EXPECT_TRUE(stack->complete) << "thread " << tid << ": " << stack->incomplete_why;
    ASSERT_FALSE(stack->frames.empty());
    EXPECT_EQ(stack->frames[0].pc, t.regs.rip) << "the first frame is where the thread stopped";
    std::string comm = comm_of(target.pid(), tid);
    if (tid == target.pid()) {
      EXPECT_TRUE(symbols.on_stack(*stack, "main")) << "main thread";
    }
    if (comm == "dyni-deep") {
      EXPECT_TRUE(symbols.on_stack(*stack, "deep_on_stack"));
    }
    if (comm == "dyni-altstack") {
      // handler → signal frame → the code it interrupted (pthread_kill's caller)
      bool signal_frame = false;
      for (const StackFrame& f : stack->frames) signal_frame |= f.signal_frame;
      EXPECT_TRUE(signal_frame) << "no signal frame on the alternate stack's thread";
      EXPECT_TRUE(symbols.on_stack(*stack, "on_alternate_stack")) << "did not unwind past the signal frame";
    }
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("unwound %zu threads, %zu frames, in %lld us\n", w->threads().size(), frames, static_cast<long long>(us));
  w->resume();
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// The search tables StackReader uses instead of libunwind-ptrace's lookup,
// read from a process's memory (this one's): the executable, libc and the
// vDSO each have one, and libc's has as many entries as the file says.
TEST(ModuleUnwindTables, AreFoundInMemoryForTheExecutableLibcAndTheVdso) {
  auto maps = profiler::read_maps(::getpid());
  ASSERT_TRUE(maps);
  WindowMemory memory(::getpid());
  std::vector<UnwindTable> tables = module_unwind_tables(*maps, memory);
  auto covering = [&](uint64_t pc) -> const UnwindTable* {
    for (const UnwindTable& t : tables)
      if (pc >= t.code_lo && pc < t.code_hi) return &t;
    return nullptr;
  };
  const UnwindTable* libc = covering(reinterpret_cast<uint64_t>(&::getpid));
  ASSERT_NE(libc, nullptr) << "no table for libc";
  EXPECT_NE(covering(reinterpret_cast<uint64_t>(&comm_of)), nullptr) << "no table for the executable";
  EXPECT_NE(covering(::getauxval(AT_SYSINFO_EHDR)), nullptr) << "no table for the vDSO";
  std::string libc_path;
  for (const auto& m : *maps)
    if (reinterpret_cast<uint64_t>(&::getpid) >= m.start && reinterpret_cast<uint64_t>(&::getpid) < m.end) libc_path = m.path;
  auto file = elf::ElfFile::open(libc_path);
  ASSERT_TRUE(file) << libc_path;
  const elf::Section* hdr = file->find_section(".eh_frame_hdr");
  ASSERT_NE(hdr, nullptr);
  auto bytes = file->contents(*hdr);
  ASSERT_TRUE(bytes && bytes->size() >= 12);
  uint32_t count = 0;
  std::memcpy(&count, bytes->data() + 8, 4);
  EXPECT_EQ(libc->entries, count);
  EXPECT_EQ(libc->segbase, libc->code_lo + hdr->addr) << "libc's .eh_frame_hdr, where the loader put it";
  EXPECT_EQ(libc->table_addr, libc->segbase + 12);
}

// Every instruction of glibc's own clone exit (this process's libc: clone's
// `mov $56,%eax; syscall; test; jl; jz; ret` and the child path up to its
// call) is placed: the parent's up to the ret (whatever rax holds but 0),
// the new thread's up to the call; the instruction after the call and a
// wrong syscall number are not.
TEST(CloneExit, EveryInstructionAfterGlibcsCloneSyscallIsPlaced) {
  const auto* fn = reinterpret_cast<const uint8_t*>(&::clone);
  const std::vector<uint8_t> want = {0xb8, 0x38, 0, 0, 0, 0x0f, 0x05};
  std::size_t mov = 0;
  while (mov < 256 && !std::equal(want.begin(), want.end(), fn + mov)) ++mov;
  ASSERT_LT(mov, 256u) << "no `mov $56,%eax; syscall` in clone";
  const uint64_t syscall_end = reinterpret_cast<uint64_t>(fn + mov + 7);
  auto code_around = [&](uint64_t pc) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(pc - 40), reinterpret_cast<const uint8_t*>(pc + 16));
  };
  auto place = [&](uint64_t pc, uint64_t rax) { return clone_exit_at(code_around(pc), pc - 40, pc, rax); };
  // test %rax,%rax (3); jl (2 or 6); jz +1 (2); ret (1); child: xor; ...; call *%reg
  const uint64_t jl = syscall_end + 3;
  const uint64_t jz = jl + (*reinterpret_cast<const uint8_t*>(jl) == 0x7c ? 2 : 6);
  const uint64_t ret = jz + 2;
  for (uint64_t pc : {syscall_end, jl, jz}) {
    EXPECT_EQ(place(pc, 0), CloneExit::Child) << std::hex << pc;
    EXPECT_EQ(place(pc, 1234), CloneExit::Parent) << std::hex << pc;
    // An error, or -ENOSYS at the parent's PTRACE_EVENT_CLONE stop: still the parent, nothing pushed.
    EXPECT_EQ(place(pc, static_cast<uint64_t>(-38)), CloneExit::Parent) << std::hex << pc;
  }
  EXPECT_EQ(place(ret, 1234), CloneExit::Parent);
  int child_steps = 0;
  uint64_t pc = ret + 1;
  for (; child_steps < 8; ++child_steps) {
    ASSERT_EQ(place(pc, 0), CloneExit::Child) << "child path instruction " << child_steps;
    const auto* b = reinterpret_cast<const uint8_t*>(pc);
    if (b[0] == 0xff) break;  // the call
    pc += b[0] == 0x31 ? 2 : b[0] == 0x48 ? 4 : b[0] == 0x4c ? 3 : 1;
  }
  EXPECT_GE(child_steps, 2) << "xor %ebp,%ebp and more before the call";
  EXPECT_EQ(place(pc + 2, 0), CloneExit::No) << "after the call the thread has frames of its own";
  std::vector<uint8_t> other = code_around(jl);
  other[40 - 3 - 7 + 1] = 0x27;  // mov $39 (getpid), not clone
  EXPECT_EQ(clone_exit_at(other, jl - 40, jl, 0), CloneExit::No);
}

// glibc's clone3 ends its FDE before the syscall: a thread held just after it
// (a newborn, or its parent) has no unwind information at its PC. Its stack
// must still be known: a thread storm holds one there in nearly every window,
// and no patch could ever go in.
TEST_F(ThreadUnwindTest, ThreadsHeldAtTheExitOfCloneUnwindToTheirEnd) {
  StoppableTarget target(true);  // a thread creates and joins threads forever
  ASSERT_EQ(target.read_line(), "ready");
  StackReader reader(target.pid());
  int newborn = 0, parents = 0;
  for (int window = 0; window < 2000 && (newborn < 3 || parents < 3); ++window) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    for (const auto& [tid, t] : w->threads()) {
      auto stack = reader.unwind(tid);
      ASSERT_TRUE(stack) << stack.error().message();
      EXPECT_TRUE(stack->complete) << "thread " << tid << " at " << std::hex << t.regs.rip << ": "
                                   << stack->incomplete_why;
      bool at_clone = static_cast<long>(t.regs.orig_rax) == SYS_clone3 || static_cast<long>(t.regs.orig_rax) == SYS_clone;
      if (!at_clone || stack->frames.empty() || stack->frames[0].pc != t.regs.rip) continue;
      if (t.regs.rax == 0) {
        ++newborn;
        EXPECT_EQ(stack->frames.size(), 1u) << "a new thread's stack begins at clone's exit";
      } else {
        ++parents;
        EXPECT_GE(stack->frames.size(), 3u) << "the parent returns to pthread_create and its caller";
      }
    }
    w->resume();
    if (HasFailure()) break;
  }
  std::printf("held at clone's exit: %d new threads, %d parents\n", newborn, parents);
  EXPECT_GE(newborn + parents, 1) << "no thread was ever held at clone's exit";
  EXPECT_EQ(target.ask("ping").rfind("got ping", 0), 0u);
  EXPECT_EQ(target.finish(), 0);
}

}  // namespace
}  // namespace dyni
