// The subcommands of the cost model: calibrate (measure this machine) and simulate (predict a plan on a cluster).
#pragma once

#include <string>

namespace cleave::cli {

// Flags of `cleave calibrate`.
struct CalibrateFlags {
  std::string output;    // the cluster spec to write (JSON)
  int devices = 0;       // devices of the host (0: the hardware's concurrency, one core each)
  double seconds = 0.3;  // time spent on each measurement
};

// Flags of `cleave simulate`.
struct SimulateFlags {
  std::string plan;
  std::string cluster;
  bool json = false;
  std::string timeline;  // write the predicted Chrome trace here
};

// Defined in tools/calibrate_command.cpp.
int runCalibrate(const CalibrateFlags& flags);
// Defined in tools/simulate_command.cpp.
int runSimulate(const SimulateFlags& flags);

}  // namespace cleave::cli
