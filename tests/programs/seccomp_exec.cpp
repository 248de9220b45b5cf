// Runs a program under a seccomp filter, as systemd's SystemCallFilter= does
// (Debian's redis-server.service): the filter, which here allows everything,
// is inherited across exec and by every thread.
// usage: dyni-test-seccomp-exec PROGRAM [ARGS...]
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dyni-test-seccomp-exec PROGRAM [ARGS...]\n");
    return 2;
  }
  sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  sock_fprog prog{1, &allow};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    std::perror("seccomp");
    return 1;
  }
  execv(argv[1], argv + 1);
  std::perror("execv");
  return 127;
}
