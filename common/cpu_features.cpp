// CPUID facts for the code dyni emits, checked by running it once.
#include "common/cpu_features.h"

#include <cpuid.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dyni {
namespace {

bool cpuid_says_rdpid() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c & (1u << 22))) return false;
  // Some hypervisors show RDPID but fault on it unless RDTSCP is enabled
  // too, and older kernels set TSC_AUX only with RDTSCP.
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d)) return false;
  return (d & (1u << 27)) != 0;
}

// rdpid run once in a child: a #UD kills the child, not this process.
bool rdpid_runs() {
  pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    uint64_t id = 0;
    asm volatile("rdpid %0" : "=r"(id));
    _exit(id < (uint64_t{1} << 32) ? 0 : 1);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

bool cpu_has_rdpid() {
  static const bool has = cpuid_says_rdpid() && rdpid_runs();
  return has;
}

}  // namespace dyni
