// Seccomp filters the tests install in their targets and run through
// dynid's interpreter (dynid/seccomp_filter.h).
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <vector>

namespace dyni::test {

// As systemd's MemoryDenyWriteExecute= (its seccomp form), plus a refused
// madvise: x86-64 only (anything else killed); madvise fails with EPERM;
// mmap with PROT_WRITE and PROT_EXEC both fails with EPERM; all else runs.
inline std::vector<sock_filter> no_madvise_no_wx_filter() {
  constexpr unsigned kArgs2Low = offsetof(seccomp_data, args) + 2 * 8;
  return {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 4, 0),  // to 9
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 2),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArgs2Low),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 2, 0),  // exec: write too? (at 10)
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_WRITE, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
}

}  // namespace dyni::test
