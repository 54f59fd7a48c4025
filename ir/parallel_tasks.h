// Independent compile work (one pipeline stage's graphs, one rank's lowering) run on the host's
// cores: the tasks share nothing they write, and the result does not depend on the thread count.
#pragma once

#include <cstddef>
#include <functional>

#include "ir/status.h"

namespace cleave {

// Runs task(0) .. task(count - 1), each once, on up to the host's hardware threads (one: in order
// on the calling thread). Returns the error of the lowest-numbered task that failed, so a failing
// compile says the same whatever the thread count; an exception a task throws (std::bad_alloc)
// is rethrown here once all threads have stopped. Threads that cannot be started (memory runs out,
// the process's thread limit) leave the tasks to those that were.
Status runParallelTasks(size_t count, const std::function<Status(size_t)>& task);

}  // namespace cleave
