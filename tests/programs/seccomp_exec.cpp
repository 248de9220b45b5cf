// Runs a program under seccomp filters, as systemd's units do (Debian's
// redis-server.service: SystemCallFilter=@system-service, ~@privileged
// @resources, MemoryDenyWriteExecute=true). Filters are inherited across
// exec and by every thread.
// usage: dyni-test-seccomp-exec [OPTION]... PROGRAM [ARGS...]
//   (no option)         a filter that allows every call
//   --allow-file FILE   allow the calls named in FILE (one per line), kill
//                       the process on any other (systemd's default action)
//   --deny-file FILE    ... except those named in FILE (systemd's "~" list)
//   --mdwe-seccomp      MemoryDenyWriteExecute= as systemd 252 builds it: a
//                       second filter failing mmap(PROT_WRITE|PROT_EXEC),
//                       mprotect/pkey_mprotect(PROT_EXEC) and shmat(SHM_EXEC)
//                       with EPERM
//   --mdwe-prctl        the kernel's own: prctl(PR_SET_MDWE, REFUSE_EXEC_GAIN)
//   --deny NAME         allow everything but NAME, which fails with EPERM
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

namespace {

constexpr int kPrSetMdwe = 65;                 // include/uapi/linux/prctl.h (Linux 6.3)
constexpr unsigned long kMdweRefuseExecGain = 1;

std::set<std::string> names_in(const char* path) {
  std::ifstream in(path);
  std::set<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.insert(line);
  return out;
}

bool load(scmp_filter_ctx ctx, const char* what) {
  int r = seccomp_load(ctx);
  seccomp_release(ctx);
  if (r != 0) std::fprintf(stderr, "dyni-test-seccomp-exec: loading %s: %s\n", what, std::strerror(-r));
  return r == 0;
}

// Calls unknown to libseccomp on this architecture are skipped, as systemd does.
void add_named(scmp_filter_ctx ctx, uint32_t action, const std::string& name) {
  int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr != __NR_SCMP_ERROR) seccomp_rule_add(ctx, action, nr, 0);
}

bool allow_list(const std::set<std::string>& allowed, const std::set<std::string>& denied) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (!ctx) return false;
  for (const std::string& name : allowed)
    if (!denied.contains(name)) add_named(ctx, SCMP_ACT_ALLOW, name);
  return load(ctx, "the allow list");
}

bool deny_one(const std::string& name) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return false;
  add_named(ctx, SCMP_ACT_ERRNO(EPERM), name);
  return load(ctx, "the deny rule");
}

bool mdwe_seccomp() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return false;
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  int r = seccomp_rule_add(ctx, eperm, SCMP_SYS(mmap), 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE, PROT_EXEC | PROT_WRITE));
  r |= seccomp_rule_add(ctx, eperm, SCMP_SYS(mprotect), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  r |= seccomp_rule_add(ctx, eperm, SCMP_SYS(pkey_mprotect), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  r |= seccomp_rule_add(ctx, eperm, SCMP_SYS(shmat), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC));
  if (r != 0) {
    seccomp_release(ctx);
    return false;
  }
  return load(ctx, "MemoryDenyWriteExecute");
}

}  // namespace

int main(int argc, char** argv) {
  std::set<std::string> allowed, denied;
  bool has_allow_list = false, mdwe_rules = false, mdwe_prctl = false;
  std::string deny;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; ++i) {
    std::string opt = argv[i];
    if (opt == "--allow-file" && i + 1 < argc) allowed = names_in(argv[++i]), has_allow_list = true;
    else if (opt == "--deny-file" && i + 1 < argc) denied = names_in(argv[++i]);
    else if (opt == "--mdwe-seccomp") mdwe_rules = true;
    else if (opt == "--mdwe-prctl") mdwe_prctl = true;
    else if (opt == "--deny" && i + 1 < argc) deny = argv[++i];
    else {
      std::fprintf(stderr, "dyni-test-seccomp-exec: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i >= argc || (has_allow_list && allowed.empty())) {
    std::fprintf(stderr, "usage: dyni-test-seccomp-exec [OPTION]... PROGRAM [ARGS...]\n");
    return 2;
  }
  if (mdwe_prctl && prctl(kPrSetMdwe, kMdweRefuseExecGain, 0, 0, 0) != 0) {
    std::perror("prctl(PR_SET_MDWE)");
    return 1;
  }
  // The allow list last, as systemd does: it need not allow seccomp(2).
  if (mdwe_rules && !mdwe_seccomp()) return 1;
  bool loaded = false;
  if (has_allow_list) {
    loaded = allow_list(allowed, denied);
  } else if (!deny.empty()) {
    loaded = deny_one(deny);
  } else {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    loaded = ctx && load(ctx, "the allow-all filter");
  }
  if (!loaded) return 1;
  execv(argv[i], argv + i);
  std::perror("execv");
  return 127;
}
