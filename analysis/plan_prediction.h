// What `cleave simulate` predicts for a plan on a cluster: step time, throughput, MFU and memory per device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/plan.pb.h"
#include "ir/status.h"
#include "analysis/cost_model.h"
#include "analysis/plan_timeline.h"

namespace cleave {

// One rank's predicted figures.
struct RankPrediction {
  int32_t rank = 0;
  int32_t stage = 0;
  int64_t peak_memory_bytes = 0;  // the largest planned arena of its programs
  double end_s = 0;               // when its last instruction of the program ends
  double busy_s = 0;              // time its compute stream works
};

// A plan's predicted run of its main program on one cluster.
struct PlanPrediction {
  std::string program;            // "train" or "infer" (mainProgramName)
  ProgramTimeline timeline;       // the simulated events
  double step_time_s = 0;         // one run of the program, all ranks
  double samples_per_s = 0;       // the global batch over the step time
  double model_flops = 0;         // FLOPs of every rank's kernels in one run (tp ranks' repeated work included)
  DType dtype = DType::kF32;      // the dtype MFU takes the peak of: the plan's first float parameter's
  double peak_flops_per_device = 0;
  double mfu = 0;                 // model_flops / step_time / (devices x peak)
  int64_t memory_limit_bytes = 0; // the cluster's device memory
  int64_t max_memory_bytes = 0;   // the largest rank's
  bool fits_memory = true;
  std::vector<RankPrediction> ranks;  // in Plan.ranks order
};

// Simulates the main program of `plan` on `model`'s cluster (simulateProgram) and derives the
// figures above. Errors: a plan whose ranks cannot run together (unmatched communication, a
// deadlock) or an instruction the cost model cannot time.
Expected<PlanPrediction> predictPlan(const planpb::Plan& plan, const CostModel& model);

}  // namespace cleave
