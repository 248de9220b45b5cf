// Running a target's seccomp filters on dyni's own calls (seccomp_filter.h).
#include "dynid/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {

constexpr uint32_t kSeccompDataBytes = 64;  // sizeof(struct seccomp_data)
constexpr std::size_t kMaxInstructions = 4096;  // BPF_MAXINSNS
constexpr uint32_t kMemWords = 16;              // BPF_MEMWORDS
constexpr std::size_t kMaxFilters = 8192;       // above the kernel's 32768-instruction path (4 + length each)

// The 32-bit word at `offset` of the call's struct seccomp_data (x86-64,
// little-endian): nr, arch, instruction_pointer, args[6].
uint32_t data_word(const SeccompCall& call, uint32_t offset) {
  auto half = [](uint64_t v, uint32_t off) { return static_cast<uint32_t>(off % 8 == 0 ? v : v >> 32); };
  if (offset == 0) return static_cast<uint32_t>(call.nr);
  if (offset == 4) return AUDIT_ARCH_X86_64;
  if (offset < 16) return half(call.ip, offset);
  return half(call.args[(offset - 16) / 8], offset);
}

// The instructions seccomp accepts (kernel/seccomp.c seccomp_check_filter,
// net/core/filter.c bpf_check_classic), with their static limits. A program
// outside them was not installed by this kernel: refuse to reason about it.
Status check_instruction(const sock_filter& in, std::size_t pc, std::size_t length) {
  const std::size_t after = length - pc - 1;  // instructions after this one
  switch (in.code) {
    case BPF_LD | BPF_W | BPF_ABS:
      if (in.k >= kSeccompDataBytes || in.k % 4 != 0) return fail(fmt::format("instruction {} loads outside seccomp_data", pc));
      return ok();
    case BPF_ALU | BPF_DIV | BPF_K:
      if (in.k == 0) return fail(fmt::format("instruction {} divides by zero", pc));
      return ok();
    case BPF_ALU | BPF_LSH | BPF_K:
    case BPF_ALU | BPF_RSH | BPF_K:
      if (in.k >= 32) return fail(fmt::format("instruction {} shifts by {}", pc, in.k));
      return ok();
    case BPF_LD | BPF_MEM:
    case BPF_LDX | BPF_MEM:
    case BPF_ST:
    case BPF_STX:
      if (in.k >= kMemWords) return fail(fmt::format("instruction {} uses scratch word {}", pc, in.k));
      return ok();
    case BPF_JMP | BPF_JA:
      if (in.k >= after) return fail(fmt::format("instruction {} jumps out of the program", pc));
      return ok();
    case BPF_JMP | BPF_JEQ | BPF_K: case BPF_JMP | BPF_JEQ | BPF_X:
    case BPF_JMP | BPF_JGE | BPF_K: case BPF_JMP | BPF_JGE | BPF_X:
    case BPF_JMP | BPF_JGT | BPF_K: case BPF_JMP | BPF_JGT | BPF_X:
    case BPF_JMP | BPF_JSET | BPF_K: case BPF_JMP | BPF_JSET | BPF_X:
      if (in.jt >= after || in.jf >= after) return fail(fmt::format("instruction {} jumps out of the program", pc));
      return ok();
    case BPF_LD | BPF_W | BPF_LEN: case BPF_LDX | BPF_W | BPF_LEN:
    case BPF_RET | BPF_K: case BPF_RET | BPF_A:
    case BPF_ALU | BPF_ADD | BPF_K: case BPF_ALU | BPF_ADD | BPF_X:
    case BPF_ALU | BPF_SUB | BPF_K: case BPF_ALU | BPF_SUB | BPF_X:
    case BPF_ALU | BPF_MUL | BPF_K: case BPF_ALU | BPF_MUL | BPF_X:
    case BPF_ALU | BPF_DIV | BPF_X:
    case BPF_ALU | BPF_AND | BPF_K: case BPF_ALU | BPF_AND | BPF_X:
    case BPF_ALU | BPF_OR | BPF_K: case BPF_ALU | BPF_OR | BPF_X:
    case BPF_ALU | BPF_XOR | BPF_K: case BPF_ALU | BPF_XOR | BPF_X:
    case BPF_ALU | BPF_LSH | BPF_X: case BPF_ALU | BPF_RSH | BPF_X:
    case BPF_ALU | BPF_NEG:
    case BPF_LD | BPF_IMM: case BPF_LDX | BPF_IMM:
    case BPF_MISC | BPF_TAX: case BPF_MISC | BPF_TXA:
      return ok();
    default:
      return fail(fmt::format("instruction {} has opcode {:#x}, which seccomp does not accept", pc, in.code));
  }
}

Status check_program(std::span<const sock_filter> program) {
  if (program.empty() || program.size() > kMaxInstructions)
    return fail(fmt::format("a filter of {} instructions", program.size()));
  for (std::size_t pc = 0; pc < program.size(); ++pc)
    if (auto r = check_instruction(program[pc], pc, program.size()); !r) return r;
  if (BPF_CLASS(program.back().code) != BPF_RET) return fail("the filter does not end in a return");
  return ok();
}

uint32_t alu(uint16_t op, uint32_t a, uint32_t operand) {
  switch (op) {
    case BPF_ADD: return a + operand;
    case BPF_SUB: return a - operand;
    case BPF_MUL: return a * operand;
    case BPF_DIV: return a / operand;  // the caller handles a zero divisor
    case BPF_AND: return a & operand;
    case BPF_OR: return a | operand;
    case BPF_XOR: return a ^ operand;
    case BPF_LSH: return a << (operand & 31);  // as x86's shl: the count masked
    case BPF_RSH: return a >> (operand & 31);
    default: return static_cast<uint32_t>(-static_cast<int64_t>(a));  // BPF_NEG
  }
}

bool jump_taken(uint16_t op, uint32_t a, uint32_t operand) {
  switch (op) {
    case BPF_JEQ: return a == operand;
    case BPF_JGT: return a > operand;
    case BPF_JGE: return a >= operand;
    default: return (a & operand) != 0;  // BPF_JSET
  }
}

// SECCOMP_RET_ACTION_FULL as the kernel orders actions: as a signed number,
// the smaller the more severe.
int32_t severity(uint32_t answer) { return static_cast<int32_t>(answer & SECCOMP_RET_ACTION_FULL); }

std::string call_name(long nr) {
  switch (nr) {
    case SYS_mmap: return "mmap";
    case SYS_munmap: return "munmap";
    case SYS_madvise: return "madvise";
    case SYS_prctl: return "prctl";
    case SYS_mprotect: return "mprotect";
    case SYS_rt_sigreturn: return "rt_sigreturn";
    default: return fmt::format("system call {}", nr);
  }
}

}  // namespace

Result<uint32_t> run_seccomp_program(std::span<const sock_filter> program, const SeccompCall& call) {
  if (auto r = check_program(program); !r) return std::unexpected(r.error());
  uint32_t a = 0, x = 0;
  uint32_t mem[kMemWords] = {};
  // Every jump goes forward (checked): the loop ends.
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& in = program[pc];
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
        a = BPF_MODE(in.code) == BPF_ABS ? data_word(call, in.k)
            : BPF_MODE(in.code) == BPF_LEN ? kSeccompDataBytes
            : BPF_MODE(in.code) == BPF_MEM ? mem[in.k] : in.k;
        break;
      case BPF_LDX:
        x = BPF_MODE(in.code) == BPF_LEN ? kSeccompDataBytes : BPF_MODE(in.code) == BPF_MEM ? mem[in.k] : in.k;
        break;
      case BPF_ST: mem[in.k] = a; break;
      case BPF_STX: mem[in.k] = x; break;
      case BPF_MISC:
        if (BPF_MISCOP(in.code) == BPF_TAX) x = a; else a = x;
        break;
      case BPF_ALU: {
        const uint32_t operand = BPF_SRC(in.code) == BPF_X ? x : in.k;
        if (BPF_OP(in.code) == BPF_DIV && operand == 0) return 0;  // classic BPF: the program returns 0
        a = alu(BPF_OP(in.code), a, operand);
        break;
      }
      case BPF_JMP:
        if (BPF_OP(in.code) == BPF_JA) pc += in.k;
        else pc += jump_taken(BPF_OP(in.code), a, BPF_SRC(in.code) == BPF_X ? x : in.k) ? in.jt : in.jf;
        break;
      case BPF_RET:
        return BPF_RVAL(in.code) == BPF_A ? a : in.k;
    }
  }
  return fail("the filter ran past its end");  // unreachable: it ends in a return
}

Result<uint32_t> seccomp_answer(const std::vector<std::vector<sock_filter>>& filters, const SeccompCall& call) {
  uint32_t answer = SECCOMP_RET_ALLOW;
  for (auto program = filters.rbegin(); program != filters.rend(); ++program) {  // newest first, as the kernel
    auto r = run_seccomp_program(*program, call);
    if (!r) return r;
    if (severity(*r) < severity(answer)) answer = *r;
  }
  return answer;
}

bool may_notify_supervisor(std::span<const sock_filter> program) {
  for (const sock_filter& in : program) {
    if (in.code == (BPF_RET | BPF_A)) return true;
    if (in.code == (BPF_RET | BPF_K) && (in.k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_USER_NOTIF) return true;
  }
  return false;
}

bool seccomp_allows(uint32_t answer) {
  const uint32_t action = answer & SECCOMP_RET_ACTION_FULL;
  return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
}

std::string describe_seccomp_answer(uint32_t answer) {
  const uint32_t data = answer & SECCOMP_RET_DATA;
  switch (answer & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS: return "KILL_PROCESS";
    case SECCOMP_RET_KILL_THREAD: return "KILL_THREAD";
    case SECCOMP_RET_TRAP: return "TRAP (SIGSYS)";
    case SECCOMP_RET_ERRNO: return fmt::format("ERRNO {} ({})", data, errno_text(static_cast<int>(data)));
    case SECCOMP_RET_USER_NOTIF: return "USER_NOTIF (a supervisor answers)";
    case SECCOMP_RET_TRACE: return "TRACE (a tracer answers)";
    case SECCOMP_RET_LOG: return "LOG";
    case SECCOMP_RET_ALLOW: return "ALLOW";
    default: return fmt::format("{:#x} (an unknown action, which the kernel treats as a kill)", answer);
  }
}

std::string describe_call(const SeccompCall& call) {
  std::string out = call_name(call.nr) + "(";
  for (std::size_t i = 0; i < call.args.size(); ++i) out += fmt::format("{}{:#x}", i ? ", " : "", call.args[i]);
  return out + ")";
}

Result<std::vector<std::vector<sock_filter>>> read_seccomp_filters(pid_t tid) {
  std::vector<std::vector<sock_filter>> filters;
  for (std::size_t index = 0; index < kMaxFilters; ++index) {
    auto addr = reinterpret_cast<void*>(index);
    long count = ::ptrace(PTRACE_SECCOMP_GET_FILTER, tid, addr, nullptr);
    if (count < 0 && errno == ENOENT) return filters;  // past the oldest
    if (count < 0) {
      const int e = errno;
      std::string why = e == EACCES ? " (dynid needs CAP_SYS_ADMIN and must not run under seccomp itself)"
                        : e == EINVAL ? " (the thread left filter mode, or the kernel lacks CONFIG_CHECKPOINT_RESTORE)"
                        : e == EMEDIUMTYPE ? " (a filter that is not classic BPF)" : "";
      return fail(sys_error(fmt::format("PTRACE_SECCOMP_GET_FILTER {} of thread {}", index, tid), e) + why);
    }
    if (count == 0 || static_cast<std::size_t>(count) > kMaxInstructions)
      return fail(fmt::format("seccomp filter {} of thread {} has {} instructions", index, tid, count));
    std::vector<sock_filter> program(static_cast<std::size_t>(count));
    if (::ptrace(PTRACE_SECCOMP_GET_FILTER, tid, addr, program.data()) != count)
      return fail(fmt::format("seccomp filter {} of thread {} changed size while read", index, tid));
    filters.push_back(std::move(program));
  }
  return fail(fmt::format("thread {} has more than {} seccomp filters", tid, kMaxFilters));
}

char seccomp_mode(const std::string& status) {
  const std::string mode = status_field(status, "Seccomp:");
  const std::size_t digit = mode.find_first_not_of(" \t");
  return digit == std::string::npos ? '0' : mode[digit];
}

Status seccomp_lets_through(pid_t pid, pid_t tid, std::span<const SeccompCall> calls) {
  auto status = read_file(fmt::format("/proc/{}/task/{}/status", pid, tid), 1 << 16);
  if (!status) return std::unexpected(status.error());
  const char mode = seccomp_mode(*status);
  if (mode == '0') return ok();
  if (mode != '2')
    return fail(fmt::format("thread {} runs under seccomp mode {} (1: strict): it can make no call dyni needs", tid,
                            mode));
  auto filters = read_seccomp_filters(tid);
  if (!filters) return std::unexpected(filters.error());
  for (const auto& program : *filters)
    if (may_notify_supervisor(program))
      return fail(fmt::format("a seccomp filter of thread {} hands calls to a supervisor process "
                              "(SECCOMP_RET_USER_NOTIF): dyni's stops would disturb it", tid));
  for (const SeccompCall& call : calls) {
    auto answer = seccomp_answer(*filters, call);
    if (!answer)
      return fail(fmt::format("a seccomp filter of thread {} is not understood: {}", tid, answer.error().message()));
    if (!seccomp_allows(*answer))
      return fail(fmt::format("the seccomp filter of thread {} answers {} with {}", tid, describe_call(call),
                              describe_seccomp_answer(*answer)));
  }
  return ok();
}

}  // namespace dyni
