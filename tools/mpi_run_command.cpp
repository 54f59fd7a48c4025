// `cleave run --backend mpi` (cpu) and `--backend nccl` under mpirun (one GPU per process): one
// process of an mpirun job runs one rank of the plan; rank 0 reports.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "passes/lowering/memory_planner.h"
#include "runtime/train/checkpoint.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/nccl_communicator.h"
#include "runtime/exec/rank_group.h"
#include "runtime/train/trainer.h"
#include "tools/plan_commands.h"
#include "tools/units_text.h"

namespace cleave::cli {
namespace {

// The largest exit code of any process (0 when all succeeded) and rank 0's, agreed over every rank,
// so that a failure every process meets at start-up ends all of them the same way.
Expected<std::pair<int, int>> agreeOnExitCodes(runtime::Communicator& communicator, int exit_code) {
  std::vector<int> everyone(static_cast<size_t>(communicator.worldSize()));
  for (int rank = 0; rank < communicator.worldSize(); ++rank) everyone[static_cast<size_t>(rank)] = rank;
  int32_t codes[2] = {exit_code, communicator.rank() == 0 ? exit_code : 0};
  runtime::TensorView view{codes, TensorType{DType::kI32, {2}}};
  CLEAVE_TRY(communicator.allReduce(everyone, {&view, 1}, {&view, 1}, runtime::ReduceOp::kMax));
  return std::pair<int, int>{codes[0], codes[1]};
}

// Prints `cleave: error: <message>` in one write (mpirun interleaves the processes' output by
// writes) and returns the exit code.
int reportJobError(const Status& status) {
  std::string line = "cleave: error: " + status.message() + "\n";
  std::fputs(line.c_str(), stderr);
  return status.exitCode();
}

// An error of this process's rank, with the rank in front when the message does not start with it.
int reportRankError(int rank, const Status& status) {
  std::string prefix = "rank " + std::to_string(rank) + ": ";
  if (status.message().compare(0, prefix.size(), prefix) == 0) return reportJobError(status);
  return reportJobError(status.withContext(prefix));
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
  for (const auto& rank : plan.ranks()) {
    if (rank.rank() != 0) continue;
    MemoryReport memory = memoryReport(rank);
    std::printf("peak memory of rank 0: %s arena = parameters %s + optimizer state %s + gradients/activations %s\n",
                mibText(report.peak_arena_bytes).c_str(), mibText(memory.param_bytes).c_str(),
                mibText(memory.optimizer_state_bytes).c_str(), mibText(memory.activation_region_bytes).c_str());
  }
  if (!report.last_checkpoint.empty()) std::printf("checkpoint: %s\n", report.last_checkpoint.c_str());
}

}  // namespace

// Steps: join the job and make this rank's communicator; read the plan, make the GPU of a cuda run,
// and agree that every process can run it (a plan for N ranks on M != N processes ends all of them
// with exit 1, rank 0 saying why; a failure rank 0 does not share is told by the rank that has it);
// on GPUs connect the ranks through NCCL (the MPI communicator keeps the host-side collectives:
// losses, evaluation sums, checkpoint barriers); prepare this process's rank only; train; rank 0
// reports. A failure after start-up tells the other ranks (they stop naming this one) and leaves
// MPI unfinalized: mpirun then ends the job.
int runRunMpi(const RunFlags& flags) {
  // 1. The job and this rank's endpoint.
  auto joined = runtime::MpiJob::join();
  if (!joined) return reportJobError(joined.status());
  std::unique_ptr<runtime::MpiJob> job = std::move(*joined);
  const int rank = job->rank();
  auto created_communicator = job->createCommunicator(flags.timeout);
  if (!created_communicator) {
    job->markFailed();
    return reportRankError(rank, created_communicator.status());
  }
  std::unique_ptr<runtime::Communicator> communicator = std::move(*created_communicator);

  // 2. Checks every process makes alike: the rank reporting a failure says why, the others exit
  //    with the same code quietly.
  auto plan = readPlanFile(flags.plan);
  const bool nccl = flags.backend == "nccl";
  std::unique_ptr<runtime::Device> device;  // the GPU of a cuda run (declared before the communicator it outlives)
  auto check = [&]() -> Status {
    if (nccl) {
      CLEAVE_ASSIGN_OR_RETURN(device, runtime::createProcessDevice(flags.device));
    }
    if (!flags.inputs.empty())
      return Status::usage("--backend " + flags.backend + " under mpirun runs training plans; run inference (--inputs) " +
                           (nccl ? "in one process" : "with --backend local"));
    if (!plan) return plan.status();
    if ((*plan)->ranks_size() != job->size())
      return Status::badInput(flags.plan + " is a plan for " + std::to_string((*plan)->ranks_size()) +
                              " ranks but mpirun started " + std::to_string(job->size()) +
                              (job->size() == 1 ? " process" : " processes") + "; run it with mpirun -np " +
                              std::to_string((*plan)->ranks_size()));
    if (!(*plan)->has_training() || (*plan)->training().loss_output().empty())
      return Status::badInput(flags.plan + " is an inference plan; --backend " + flags.backend +
                              " under mpirun runs training plans");
    return Status::ok();
  };
  Status usable = check();
  auto codes = agreeOnExitCodes(*communicator, usable.exitCode());
  if (!codes) {
    job->markFailed();
    return reportRankError(rank, codes.status());
  }
  auto [worst, rank0_code] = *codes;
  if (worst != 0) {
    if (!usable.isOk() && rank == 0) reportJobError(usable);
    if (!usable.isOk() && rank != 0 && rank0_code == 0) reportRankError(rank, usable);
    communicator.reset();
    return worst;
  }

  // 3. On GPUs, the NCCL communicator (every process takes part in making it).
  std::unique_ptr<runtime::Communicator> device_communicator;
  if (nccl) {
#if CLEAVE_HAVE_CUDA
    auto created_nccl = runtime::createNcclCommunicatorForProcess(*device, flags.timeout);
    if (!created_nccl) {
      communicator->abort(created_nccl.status());
      job->markFailed();
      return reportRankError(rank, created_nccl.status());
    }
    device_communicator = std::move(*created_nccl);
#endif
  }

  // 4. This process's rank: its programs and parameters only. Kernel threads default to this
  //    host's cores shared by the job's processes on it.
  runtime::RankGroupOptions group_options;
  group_options.threads =
      flags.threads > 0 ? flags.threads
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / job->localSize());
  group_options.timeout_seconds = flags.timeout;
  auto created =
      runtime::RankGroup::createForProcess(**plan, *communicator, group_options, device.get(), device_communicator.get());
  if (!created) {
    communicator->abort(created.status());
    if (device_communicator) device_communicator->abort(created.status());
    job->markFailed();
    return reportRankError(rank, created.status());
  }
  runtime::RankGroup& group = **created;

  // 5. Train; only rank 0 writes metrics, draws progress and prints evaluations and the summary.
  runtime::TrainOptions options = trainOptionsFor(flags);
  options.threads = group_options.threads;
  if (rank != 0) {
    options.metrics_path.clear();
    options.trace_path.clear();
    options.progress = runtime::ProgressMode::kNever;
    options.print_summaries = false;
  }
  runtime::TrainReport report;
  Status trained = runtime::train(group, **plan, options, report);
  if (!trained) {
    group.abort(trained);
    if (device_communicator) device_communicator->abort(trained);
    job->markFailed();
    return reportRankError(rank, trained);
  }
  if (rank == 0) printSummary(**plan, report, job->size());
  std::fflush(stdout);
  return 0;
}

}  // namespace cleave::cli
