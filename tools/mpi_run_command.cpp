// `cleave run --backend mpi` (cpu) and `--backend nccl` under mpirun (one GPU per process): one
// process of an mpirun job runs one rank of the plan (runtime/exec/mpi_training.h); rank 0 reports.
#include <cstdio>
#include <string>

#include "ir/plan.pb.h"
#include "passes/lowering/memory_planner.h"
#include "runtime/exec/mpi_training.h"
#include "runtime/train/trainer.h"
#include "tools/plan_commands.h"
#include "tools/units_text.h"

namespace cleave::cli {
namespace {

// Prints `cleave: error: <message>` in one write (mpirun interleaves the processes' output by
// writes).
void printJobError(const Status& status) {
  std::string line = "cleave: error: " + status.message() + "\n";
  if (status.kind() == ErrorKind::kUsage) line += "Run 'cleave run --help' for usage.\n";
  std::fputs(line.c_str(), stderr);
}

// Prints what rank 0 reports after training: the run's summary and rank 0's memory.
void printSummary(const planpb::Plan& plan, const runtime::TrainReport& report, int processes) {
  std::printf("trained steps %lld..%lld in %.1f s on %d processes: %.1f samples/s, final loss %.4f\n",
              static_cast<long long>(report.start_step), static_cast<long long>(report.steps), report.train_seconds,
              processes, report.samples_per_s, report.final_loss);
  if (report.final_eval && report.final_eval->accuracy)
    std::printf("eval accuracy: %.4f on %lld samples%s\n", *report.final_eval->accuracy,
                static_cast<long long>(report.final_eval->samples),
                report.final_eval->loss ? (" (loss " + std::to_string(*report.final_eval->loss) + ")").c_str() : "");
  if (report.final_eval && report.final_eval->top5_accuracy)
    std::printf("eval top-5 accuracy: %.4f\n", *report.final_eval->top5_accuracy);
  if (report.final_eval && report.final_eval->perplexity)
    std::printf("eval perplexity: %.4f\n", *report.final_eval->perplexity);
  for (const auto& rank : plan.ranks()) {
    if (rank.rank() != 0) continue;
    MemoryReport memory = memoryReport(rank);
    std::printf("peak memory of rank 0: %s arena = parameters %s + optimizer state %s + gradients/activations %s\n",
                mibText(report.peak_arena_bytes).c_str(), mibText(memory.param_bytes).c_str(),
                mibText(memory.optimizer_state_bytes).c_str(), mibText(memory.activation_region_bytes).c_str());
  }
  if (!report.last_checkpoint.empty()) std::printf("checkpoint: %s\n", report.last_checkpoint.c_str());
  std::fflush(stdout);
}

}  // namespace

int runRunMpi(const RunFlags& flags) {
  runtime::MpiTrainingOptions options;
  options.plan_path = flags.plan;
  options.backend = flags.backend;
  options.device = flags.device;
  options.timeout_seconds = flags.timeout;
  options.stall_seconds = flags.heartbeat;
  options.threads = flags.threads;
  options.inference = !flags.inputs.empty();
  options.train = trainOptionsFor(flags);
  runtime::MpiTrainingReports reports;
  reports.error = printJobError;
  reports.trained = printSummary;
  return runtime::trainUnderMpirun(options, reports);
}

}  // namespace cleave::cli
