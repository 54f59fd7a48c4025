// What `cleave simulate` predicts for a plan: the simulated step plus throughput, FLOPs, MFU and memory per rank.
#include "analysis/plan_prediction.h"

#include <algorithm>
#include <map>

#include "ir/parallel_tasks.h"
#include "ir/plan.h"
#include "analysis/plan_kernels.h"
#include "analysis/plan_report.h"
#include "ir/shared_programs.h"

namespace cleave {
namespace {

// FLOPs of the kernels of `program` on `rank`, by their ops' cost rules.
Expected<double> programFlops(const planpb::RankPlan& rank, const planpb::Program& program) {
  double flops = 0;
  CLEAVE_TRY(forEachKernel(rank, program, [&](int, const planpb::Instruction&, const OpContext& op) {
    flops += op.def.cost(op).flops;
  }));
  return flops;
}

// The dtype of the plan's first float parameter (f32 when it has none).
DType parameterDType(const planpb::Plan& plan) {
  for (const auto& rank : plan.ranks())
    for (const auto& param : rank.parameters()) {
      if (param.buffer() < 0 || param.buffer() >= rank.buffers_size()) continue;
      std::optional<DType> dtype = parseDType(rank.buffers(param.buffer()).type().dtype());
      if (dtype && isFloat(*dtype)) return *dtype;
    }
  return DType::kF32;
}

}  // namespace

Expected<PlanPrediction> predictPlan(const planpb::Plan& plan, const CostModel& model) {
  PlanPrediction prediction;
  prediction.program = mainProgramName(plan);
  if (prediction.program.empty()) return Status::badInput("the plan has no program to simulate");
  CLEAVE_ASSIGN_OR_RETURN(prediction.timeline, simulateProgram(plan, prediction.program, model));
  prediction.step_time_s = prediction.timeline.step_time_s;
  if (prediction.step_time_s > 0)
    prediction.samples_per_s = static_cast<double>(plan.global_batch()) / prediction.step_time_s;

  // Per rank: memory, end, busy compute time and kernel FLOPs.
  const DeviceSpec& device = model.cluster().device;
  prediction.memory_limit_bytes = device.memory_bytes;
  // Peak memory and FLOPs of each rank holding programs, found in parallel.
  std::map<int32_t, std::pair<int64_t, double>> memory_and_flops;  // by rank holding programs
  std::vector<const planpb::RankPlan*> running_ranks;
  for (const planpb::RankPlan& rank : plan.ranks()) {
    const planpb::RankPlan& running = rankRunning(plan, rank);
    if (memory_and_flops.try_emplace(running.rank()).second) running_ranks.push_back(&running);
  }
  CLEAVE_TRY(runParallelTasks(running_ranks.size(), [&](size_t i) -> Status {
    const planpb::RankPlan& running = *running_ranks[i];
    std::pair<int64_t, double>& figures = memory_and_flops.at(running.rank());
    figures.first = reportRank(running, prediction.program).peak_memory_bytes;
    if (const planpb::Program* program = findProgram(running, prediction.program)) {
      CLEAVE_ASSIGN_OR_RETURN(figures.second, programFlops(running, *program));
    }
    return Status::ok();
  }));
  for (int r = 0; r < plan.ranks_size(); ++r) {
    // A rank that runs another's programs (kept shared) has that rank's figures.
    const planpb::RankPlan& rank = plan.ranks(r);
    const planpb::RankPlan& running = rankRunning(plan, rank);
    const RankTimeline& ranked = runningTimeline(prediction.timeline, prediction.timeline.ranks[r]);
    RankPrediction figures;
    figures.rank = rank.rank();
    figures.stage = rank.stage();
    figures.end_s = ranked.end_s;
    for (const TimelineEvent& event : ranked.events)
      if (event.stream == 0) figures.busy_s += event.duration_s;
    const std::pair<int64_t, double>& known = memory_and_flops.at(running.rank());
    figures.peak_memory_bytes = known.first;
    prediction.model_flops += known.second;
    prediction.max_memory_bytes = std::max(prediction.max_memory_bytes, figures.peak_memory_bytes);
    prediction.ranks.push_back(figures);
  }
  prediction.fits_memory = device.memory_bytes <= 0 || prediction.max_memory_bytes <= device.memory_bytes;

  // MFU: the FLOPs done per second over what every device could do at its peak.
  prediction.dtype = parameterDType(plan);
  prediction.peak_flops_per_device = device.peakFlops(prediction.dtype);
  const double capacity = prediction.peak_flops_per_device * std::max(1, plan.ranks_size());
  if (prediction.step_time_s > 0 && capacity > 0)
    prediction.mfu = prediction.model_flops / prediction.step_time_s / capacity;
  return prediction;
}

}  // namespace cleave
