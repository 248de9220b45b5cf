// dynid's seccomp interpreter (dynid/seccomp_filter.h): what it answers for
// hand-made programs, what it refuses to run, and, for random programs, that
// it answers exactly what the kernel answers when the program is installed.
#include "dynid/seccomp_filter.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "tests/programs/seccomp_programs.h"

namespace dyni {
namespace {

constexpr uint32_t kArg0Low = offsetof(seccomp_data, args);
constexpr uint32_t kArg1Low = offsetof(seccomp_data, args) + 8;

SeccompCall call(long nr, uint64_t a0 = 0, uint64_t a1 = 0, uint64_t a2 = 0) { return {nr, {a0, a1, a2, 0, 0, 0}, 0}; }

uint32_t answer(const std::vector<sock_filter>& program, const SeccompCall& c) {
  auto r = run_seccomp_program(program, c);
  EXPECT_TRUE(r) << r.error().message();
  return r.value_or(0xdeadbeef);
}

TEST(SeccompFilter, RunsAMemoryDenyWriteExecuteFilterAsWritten) {
  const auto filter = test::no_madvise_no_wx_filter();
  EXPECT_EQ(answer(filter, call(SYS_mmap, 0, 4096, PROT_READ | PROT_EXEC)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(answer(filter, call(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(answer(filter, call(SYS_mmap, 0, 4096, PROT_WRITE | PROT_EXEC)), SECCOMP_RET_ERRNO | EPERM);
  EXPECT_EQ(answer(filter, call(SYS_madvise, 0, 4096, MADV_HUGEPAGE)), SECCOMP_RET_ERRNO | EPERM);
  EXPECT_EQ(answer(filter, call(SYS_munmap)), SECCOMP_RET_ALLOW);
  EXPECT_TRUE(seccomp_allows(SECCOMP_RET_ALLOW));
  EXPECT_TRUE(seccomp_allows(SECCOMP_RET_LOG));
  EXPECT_FALSE(seccomp_allows(SECCOMP_RET_ERRNO | EPERM));
  EXPECT_FALSE(seccomp_allows(SECCOMP_RET_TRACE | 7));
  EXPECT_EQ(describe_seccomp_answer(SECCOMP_RET_ERRNO | EPERM), "ERRNO 1 (Operation not permitted)");
  EXPECT_EQ(describe_call(call(SYS_madvise, 0x1000, 0x2000, 14)), "madvise(0x1000, 0x2000, 0xe, 0x0, 0x0, 0x0)");
}

// The high half of a 64-bit argument is its own word (offset + 4).
TEST(SeccompFilter, ReadsBothHalvesOfAnArgument) {
  const std::vector<sock_filter> high = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArg0Low + 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f12, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  EXPECT_EQ(answer(high, call(SYS_munmap, 0x00007f1200000000)), SECCOMP_RET_TRAP);
  EXPECT_EQ(answer(high, call(SYS_munmap, 0x0000000000007f12)), SECCOMP_RET_ALLOW);
  const std::vector<sock_filter> ip = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, instruction_pointer)),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  EXPECT_EQ(answer(ip, SeccompCall{SYS_munmap, {}, 0x1234'7fff0000}), SECCOMP_RET_ALLOW);
}

// Several filters: the most severe answer wins, whatever their order.
TEST(SeccompFilter, TheMostSevereOfSeveralFiltersWins) {
  auto returning = [](uint32_t v) { return std::vector<sock_filter>{BPF_STMT(BPF_RET | BPF_K, v)}; };
  const SeccompCall c = call(SYS_mmap);
  EXPECT_EQ(seccomp_answer({}, c).value(), SECCOMP_RET_ALLOW);
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_LOG), returning(SECCOMP_RET_ALLOW)}, c).value(), SECCOMP_RET_LOG);
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_ERRNO | 5), returning(SECCOMP_RET_TRACE)}, c).value(),
            SECCOMP_RET_ERRNO | 5u);
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_ERRNO | 5), returning(SECCOMP_RET_TRAP)}, c).value(),
            SECCOMP_RET_TRAP);
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_KILL_THREAD), returning(SECCOMP_RET_KILL_PROCESS)}, c).value(),
            SECCOMP_RET_KILL_PROCESS);
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_USER_NOTIF), returning(SECCOMP_RET_ALLOW)}, c).value(),
            SECCOMP_RET_USER_NOTIF);
}

// Between equally severe answers the kernel keeps the newest filter's
// (filters are read oldest first).
TEST(SeccompFilter, TheNewestOfEquallySevereFiltersGivesTheErrno) {
  auto returning = [](uint32_t v) { return std::vector<sock_filter>{BPF_STMT(BPF_RET | BPF_K, v)}; };
  EXPECT_EQ(seccomp_answer({returning(SECCOMP_RET_ERRNO | 5), returning(SECCOMP_RET_ERRNO | 7)}, call(SYS_mmap)).value(),
            SECCOMP_RET_ERRNO | 7u);
}

// A filter that may answer USER_NOTIF (or returns A, which could hold it).
TEST(SeccompFilter, FiltersThatMayNotifyASupervisorAreRecognised) {
  EXPECT_FALSE(may_notify_supervisor(test::no_madvise_no_wx_filter()));
  const std::vector<sock_filter> notify = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mount, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  EXPECT_TRUE(may_notify_supervisor(notify));
  EXPECT_TRUE(may_notify_supervisor(std::vector<sock_filter>{BPF_STMT(BPF_RET | BPF_A, 0)}));
}

TEST(SeccompFilter, DivisionByAZeroRegisterEndsTheProgramWithZero) {
  const std::vector<sock_filter> program = {
      BPF_STMT(BPF_LD | BPF_IMM, 10),
      BPF_STMT(BPF_LDX | BPF_IMM, 0),
      BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  EXPECT_EQ(answer(program, call(SYS_mmap)), SECCOMP_RET_KILL_THREAD);
}

// What seccomp itself would not have accepted is refused, never guessed at.
TEST(SeccompFilter, RefusesProgramsSeccompWouldNotAccept) {
  const sock_filter ret = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  const std::vector<std::vector<sock_filter>> bad = {
      {},                                                             // empty
      {BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64), ret},                  // past seccomp_data
      {BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2), ret},                   // unaligned
      {BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0), ret},                   // a half-word load
      {BPF_STMT(BPF_LD | BPF_W | BPF_IND, 0), ret},                   // indirect
      {BPF_STMT(BPF_LD | BPF_IMM, 0)},                                // no return at the end
      {BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), ret},            // jumps past the end
      {BPF_STMT(BPF_JMP | BPF_JA, 1), ret},                           // jumps past the end
      {BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 0), ret},                  // divides by zero
      {BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 32), ret},                 // shifts out
      {BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 3), ret},                  // not in seccomp's set
      {BPF_STMT(BPF_ST, 16), ret},                                    // scratch word 16
      {BPF_STMT(BPF_RET | BPF_X, 0)},                                 // return X
  };
  for (std::size_t i = 0; i < bad.size(); ++i)
    EXPECT_FALSE(run_seccomp_program(bad[i], call(SYS_mmap))) << "program " << i;
  EXPECT_FALSE(seccomp_answer({{ret}, bad[1]}, call(SYS_mmap))) << "one bad filter spoils the answer";
  EXPECT_FALSE(run_seccomp_program(std::vector<sock_filter>(4097, ret), call(SYS_mmap)));
}

// A random program that computes an errno from getppid's first two arguments
// (or lets the call through), with every ALU operation, scratch memory and
// forward jumps. getppid ignores its arguments.
std::vector<sock_filter> random_program(std::mt19937& rng) {
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  std::vector<sock_filter> p = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArg1Low + 4 * pick(2)),
      BPF_STMT(BPF_MISC | BPF_TAX, 0),
      BPF_STMT(BPF_ST, 0),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArg0Low + 4 * pick(2)),
      BPF_STMT(BPF_ST, 1),
  };
  static constexpr uint16_t kOps[] = {BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_AND, BPF_OR, BPF_XOR, BPF_LSH, BPF_RSH};
  static constexpr uint16_t kJumps[] = {BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET};
  const std::size_t body = 4 + pick(24);
  for (std::size_t i = 0; i < body; ++i) {
    const std::size_t left = body - i - 1;  // a jump may land on the first instruction after the body
    const uint32_t k = pick(4) == 0 ? pick(40) : static_cast<uint32_t>(rng());
    switch (pick(10)) {
      case 0: p.push_back(BPF_STMT(BPF_ALU | BPF_NEG, 0)); break;
      case 1: p.push_back(BPF_STMT(BPF_LD | BPF_MEM, pick(2))); break;
      case 2: p.push_back(BPF_STMT(pick(2) ? BPF_ST : BPF_STX, pick(2))); break;
      case 3: p.push_back(BPF_STMT(BPF_MISC | (pick(2) ? BPF_TAX : BPF_TXA), 0)); break;
      case 4: {
        const auto jt = static_cast<uint8_t>(pick(static_cast<uint32_t>(left) + 1));
        const auto jf = static_cast<uint8_t>(pick(static_cast<uint32_t>(left) + 1));
        p.push_back(BPF_JUMP(BPF_JMP | kJumps[pick(4)] | (pick(2) ? BPF_X : BPF_K), k, jt, jf));
        break;
      }
      default: {
        const uint16_t op = kOps[pick(9)];
        if (op == BPF_DIV || pick(3) == 0) {  // by a constant: never zero, shifts under 32
          p.push_back(BPF_STMT(BPF_ALU | op | BPF_K, op == BPF_DIV ? 1 + k % 1000 : (op == BPF_LSH || op == BPF_RSH) ? k % 32 : k));
        } else {
          p.push_back(BPF_STMT(BPF_ALU | op | BPF_X, 0));  // shifts by X: as the kernel runs them
        }
      }
    }
  }
  // errno = (A & 0x3ff), or the call runs when that is 0.
  p.push_back(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x3ff));
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0));
  p.push_back(BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_ERRNO));
  p.push_back(BPF_STMT(BPF_RET | BPF_A, 0));
  p.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return p;
}

// What the kernel answers: the program installed in a child, which calls
// getppid with each pair of arguments; 0 for a call that ran, else its errno.
std::vector<int> kernel_answers(const std::vector<sock_filter>& program,
                                const std::vector<std::pair<uint64_t, uint64_t>>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    sock_fprog prog{static_cast<unsigned short>(program.size()), const_cast<sock_filter*>(program.data())};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(3);
    for (auto [a0, a1] : args) {
      int e = syscall(SYS_getppid, a0, a1) < 0 ? errno : 0;
      if (write(fds[1], &e, sizeof e) != sizeof e) _exit(4);
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<int> out(args.size());
  std::size_t got = 0;
  while (got < out.size() * sizeof(int)) {
    ssize_t n = read(fds[0], reinterpret_cast<char*>(out.data()) + got, out.size() * sizeof(int) - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != out.size() * sizeof(int)) return {};
  return out;
}

TEST(SeccompFilter, AnswersWhatTheKernelAnswersForRandomPrograms) {
  std::mt19937 rng(20261203);
  std::mt19937_64 values(7);
  int errnos = 0, allowed = 0;
  for (int round = 0; round < 150; ++round) {
    const auto program = random_program(rng);
    std::vector<std::pair<uint64_t, uint64_t>> args;
    for (int i = 0; i < 12; ++i) args.emplace_back(i < 2 ? static_cast<uint64_t>(i) : values(), values() >> (i % 40));
    const std::vector<int> kernel = kernel_answers(program, args);
    ASSERT_EQ(kernel.size(), args.size()) << "the kernel refused program " << round << " or the child failed";
    for (std::size_t i = 0; i < args.size(); ++i) {
      const uint32_t ours = answer(program, call(SYS_getppid, args[i].first, args[i].second));
      const int expected = seccomp_allows(ours) ? 0 : static_cast<int>(ours & SECCOMP_RET_DATA);
      ASSERT_EQ(expected, kernel[i]) << "program " << round << ", call " << i;
      (expected ? errnos : allowed)++;
    }
  }
  EXPECT_GT(errnos, 100) << "the programs must exercise both answers";
  EXPECT_GT(allowed, 10);
}

}  // namespace
}  // namespace dyni
