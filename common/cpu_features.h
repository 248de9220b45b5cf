// What this machine's CPU offers to code that dyni puts into targets, which
// run on the same CPUs (a target sees the CPUID that dynid sees).
#pragma once

#include <cstdint>

namespace dyni {

// RDPID (CPUID.(EAX=7,ECX=0):ECX[22]): striped counter code reads the CPU
// number with it, and would fault (#UD) on a CPU without it.
bool cpu_has_rdpid();

}  // namespace dyni
