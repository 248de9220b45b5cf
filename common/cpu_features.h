// What this machine's CPU offers to code that dyni puts into targets, which
// run on the same CPUs (a target sees the CPUID that dynid sees).
#pragma once

#include <cstdint>

namespace dyni {

// RDPID (CPUID.(EAX=7,ECX=0):ECX[22]), with RDTSCP (CPUID.80000001h:EDX[27]),
// and rdpid run once in a forked child without faulting: striped counter
// code reads the CPU number with it, and would fault (#UD) where it is
// missing. Asked once; the first call forks.
bool cpu_has_rdpid();

}  // namespace dyni
