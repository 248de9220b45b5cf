// CPUID facts for the code dyni emits.
#include "common/cpu_features.h"

#include <cpuid.h>

namespace dyni {

bool cpu_has_rdpid() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (c & (1u << 22)) != 0;
}

}  // namespace dyni
