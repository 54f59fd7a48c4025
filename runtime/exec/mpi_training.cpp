// Training under mpirun: the job's start-up checks, this process's rank, training, and who reports what.
#include "runtime/exec/mpi_training.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "ir/plan.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/nccl_communicator.h"
#include "runtime/device/device.h"
#include "runtime/exec/rank_group.h"

namespace cleave::runtime {
namespace {

// The largest exit code of any process (0 when all succeeded) and rank 0's, agreed over every rank,
// so that a failure every process meets at start-up ends all of them the same way.
Expected<std::pair<int, int>> agreeOnExitCodes(Communicator& communicator, int exit_code) {
  std::vector<int> everyone(static_cast<size_t>(communicator.worldSize()));
  for (int rank = 0; rank < communicator.worldSize(); ++rank) everyone[static_cast<size_t>(rank)] = rank;
  int32_t codes[2] = {exit_code, communicator.rank() == 0 ? exit_code : 0};
  TensorView view{codes, TensorType{DType::kI32, {2}}};
  CLEAVE_TRY(communicator.allReduce(everyone, {&view, 1}, {&view, 1}, ReduceOp::kMax));
  return std::pair<int, int>{codes[0], codes[1]};
}

// `status` with "rank R: " in front, unless its message starts with it already.
Status withRank(int rank, const Status& status) {
  std::string prefix = "rank " + std::to_string(rank) + ": ";
  if (status.message().compare(0, prefix.size(), prefix) == 0) return status;
  return status.withContext(prefix);
}

// A usage error (the command line, the environment) is every process's alike: rank 0 alone reports
// it, without a rank, and the others exit with its code quietly.
bool reportsItself(int rank, const Status& status) { return status.kind() != ErrorKind::kUsage || rank == 0; }
Status asReported(int rank, const Status& status) {
  return status.kind() == ErrorKind::kUsage ? status : withRank(rank, status);
}

}  // namespace

int trainUnderMpirun(const MpiTrainingOptions& options, const MpiTrainingReports& reports) {
  auto report = [&](const Status& status) {
    if (reports.error) reports.error(status);
    return status.exitCode();
  };
  // 1. The job and this rank's endpoint.
  auto joined = MpiJob::join();
  if (!joined) return report(joined.status());
  std::unique_ptr<MpiJob> job = std::move(*joined);
  const int rank = job->rank();
  auto created_communicator = job->createCommunicator(options.timeout_seconds, options.stall_seconds);
  if (!created_communicator) {
    job->markFailed();
    return report(withRank(rank, created_communicator.status()));
  }
  std::unique_ptr<Communicator> communicator = std::move(*created_communicator);

  // 2. Checks every process makes alike: the rank reporting a failure says why, the others exit
  //    with the same code quietly.
  auto plan = readPlanFile(options.plan_path);
  const bool nccl = options.backend == "nccl";
  std::unique_ptr<Device> device;  // the GPU of a nccl run (declared before the communicator it outlives)
  auto check = [&]() -> Status {
    if (nccl) {
      CLEAVE_ASSIGN_OR_RETURN(device, createProcessDevice(options.device));
    }
    if (options.inference)
      return Status::usage("--backend " + options.backend + " under mpirun runs training plans; run inference (--inputs) " +
                           (nccl ? "in one process" : "with --backend local"));
    if (!plan) return plan.status();
    if ((*plan)->ranks_size() != job->size())
      return Status::badInput(options.plan_path + " is a plan for " + std::to_string((*plan)->ranks_size()) +
                              " ranks but mpirun started " + std::to_string(job->size()) +
                              (job->size() == 1 ? " process" : " processes") + "; run it with mpirun -np " +
                              std::to_string((*plan)->ranks_size()));
    if (!(*plan)->has_training() || (*plan)->training().loss_output().empty())
      return Status::badInput(options.plan_path + " is an inference plan; --backend " + options.backend +
                              " under mpirun runs training plans");
    return Status::ok();
  };
  Status usable = check();
  auto codes = agreeOnExitCodes(*communicator, usable.exitCode());
  if (!codes) {
    job->markFailed();
    return report(withRank(rank, codes.status()));
  }
  auto [worst, rank0_code] = *codes;
  if (worst != 0) {
    if (!usable.isOk() && rank == 0) report(usable);
    if (!usable.isOk() && rank != 0 && rank0_code == 0) report(withRank(rank, usable));
    communicator.reset();
    return worst;
  }

  // 3. On GPUs, the NCCL communicator (every process takes part in making it).
  std::unique_ptr<Communicator> device_communicator;
  if (nccl) {
#if CLEAVE_HAVE_CUDA
    auto created_nccl = createNcclCommunicatorForProcess(*device, options.timeout_seconds);
    if (!created_nccl) {
      communicator->abort(created_nccl.status());
      job->markFailed();
      return report(withRank(rank, created_nccl.status()));
    }
    device_communicator = std::move(*created_nccl);
#endif
  }

  // 4. This process's rank: its programs and parameters only. Kernel threads default to this
  //    host's cores shared by the job's processes on it.
  RankGroupOptions group_options;
  group_options.threads =
      options.threads > 0 ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / job->localSize());
  group_options.timeout_seconds = options.timeout_seconds;
  auto created =
      RankGroup::createForProcess(**plan, *communicator, group_options, device.get(), device_communicator.get());
  if (!created) {
    communicator->abort(created.status());
    if (device_communicator) device_communicator->abort(created.status());
    job->markFailed();
    return reportsItself(rank, created.status()) ? report(asReported(rank, created.status()))
                                                 : created.status().exitCode();
  }
  RankGroup& group = **created;

  // 5. Train; only rank 0 writes metrics, draws progress and prints evaluations and the summary.
  TrainOptions train_options = options.train;
  train_options.threads = group_options.threads;
  if (rank != 0) {
    train_options.metrics_path.clear();
    train_options.trace_path.clear();
    train_options.progress = ProgressMode::kNever;
    train_options.print_summaries = false;
  }
  TrainReport train_report;
  Status trained = train(group, **plan, train_options, train_report);
  if (!trained) {
    group.abort(trained);
    if (device_communicator) device_communicator->abort(trained);
    job->markFailed();
    return reportsItself(rank, trained) ? report(asReported(rank, trained)) : trained.exitCode();
  }
  if (rank == 0 && reports.trained) reports.trained(**plan, train_report, job->size());
  return 0;
}

}  // namespace cleave::runtime
