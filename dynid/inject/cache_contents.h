// Step 3 of an injection: the cache's contents are written while the target
// runs, since nothing reaches the cache yet (I2): the stripe table of the
// counters, the return stub, the code, the .eh_frame and its search table.
// The record is written last of all (write_record), once the frames are
// registered: a cache with a record is complete, and a new dynid (or a
// forked child's) may redo its patches.
#pragma once

#include "common/result.h"
#include "dynid/inject/prepare.h"
#include "dynid/injector.h"

namespace dyni::inject {

Status write_contents(const Prepared& p, const Injection& out);
Status write_record(const Prepared& p, const Injection& out);

}  // namespace dyni::inject
