// Stopping a training run cleanly: SIGTERM and SIGINT (Ctrl-C) ask it to stop at the end of the
// current step, checkpoint and exit 128 + the signal; a second signal ends it at once.
#pragma once

namespace cleave::runtime {

// Keeps SIGTERM and SIGINT off the threads that run kernels: blocks both in the calling thread,
// and so in every thread it starts later, and starts a thread of its own that takes them, running
// whatever handler is installed (catchStopSignals's, the MPI communicator's) or the default action.
// Call it first in a command that runs plans, before it starts any thread. A handler that ran on a
// thread in the middle of an LLVM-compiled fused kernel corrupted the heap (about 1 stop in 10 of
// tests/e2e/checkpoints.sh's SIGTERM check: a crash at exit, a checkpoint that did not resume
// bitwise) while those kernels used the stack's red zone (runtime/codegen/cpu_jit.cpp); kernels
// are not interrupted by the handlers at all since.
void routeStopSignalsToOwnThread();

// Catches SIGTERM and SIGINT from now on: the first sets the signal stopSignal() returns and
// restores the default action, so a second one ends the process as usual.
void catchStopSignals();

// The signal that asked the run to stop (SIGTERM or SIGINT), or 0 when none arrived since
// catchStopSignals() (or when they are not caught).
int stopSignal();

}  // namespace cleave::runtime
