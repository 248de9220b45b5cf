// Threads of dyni-test-stoppable that hold planted CPU state and check it in
// a tight loop: every register a signal frame carries (vector registers,
// opmasks, MXCSR, x87, PKRU, AMX tiles), as far as this CPU has them. A check
// that fails prints "WRONG <what> at byte N" and exits 1.
#pragma once

#include <string>

namespace dyni::test {

// Starts one checker thread per kind of state this CPU has; returns their
// names, e.g. "avx pkru x87 mxcsr" or "avx512 opmask pkru x87 mxcsr amx".
std::string start_cpu_state_checkers();

}  // namespace dyni::test
