// Stopping a training run cleanly: SIGTERM and SIGINT (Ctrl-C) ask it to stop at the end of the
// current step, checkpoint and exit 128 + the signal; a second signal ends it at once.
#pragma once

namespace cleave::runtime {

// Catches SIGTERM and SIGINT from now on: the first sets the signal stopSignal() returns and
// restores the default action, so a second one ends the process as usual.
void catchStopSignals();

// The signal that asked the run to stop (SIGTERM or SIGINT), or 0 when none arrived since
// catchStopSignals() (or when they are not caught).
int stopSignal();

}  // namespace cleave::runtime
