// Training under mpirun: one process of the job runs one rank of the plan (--backend mpi, or nccl on GPUs).
#pragma once

#include <functional>
#include <string>

#include "ir/plan.pb.h"
#include "ir/status.h"
#include "runtime/train/trainer.h"

namespace cleave::runtime {

// How this process runs its rank of the job.
struct MpiTrainingOptions {
  std::string plan_path;  // the .cplan file every process reads
  std::string backend = "mpi";  // "mpi" (cpu ranks) or "nccl" (one GPU per process, MPI for host collectives)
  std::string device = "cpu";   // the device flag of a nccl run (createProcessDevice)
  double timeout_seconds = 300;
  double stall_seconds = 0;   // a wait this long warns which rank holds it up (MpiJob::createCommunicator)
  int threads = 0;            // kernel threads; 0: this host's cores shared by the job's processes on it
  bool inference = false;     // inputs were given: refused (the job runs training plans)
  TrainOptions train;         // rank 0's; the other ranks write no metrics, trace, progress or summaries
};

// What a process reports, called while the job is still up (mpirun may end the other processes
// as soon as one exits, so a report must not wait for the teardown).
struct MpiTrainingReports {
  // An error this process is the one to report, its rank named ("rank R: ...") unless it is the
  // job's own (MPI cannot start, or rank 0 says why no process can run the plan).
  std::function<void(const Status& error)> error;
  // Rank 0, after training: the plan, the run's report and the number of processes.
  std::function<void(const planpb::Plan& plan, const TrainReport& report, int processes)> trained;
};

// Steps: join the job and make this rank's communicator; read the plan, make the GPU of a nccl run,
// and agree that every process can run it (a plan for N ranks on M != N processes ends all of them
// with exit 1, rank 0 saying why; a failure rank 0 does not share is told by the rank that has it);
// on GPUs connect the ranks through NCCL (the MPI communicator keeps the host-side collectives:
// losses, evaluation sums, checkpoint barriers); prepare this process's rank only; train; rank 0
// reports. A usage error (the command line, the environment: the same in every process) is reported
// by rank 0 alone, without a rank. A failure after start-up tells the other ranks (they stop naming this one) and leaves
// MPI unfinalized: mpirun then ends the job. Returns this process's exit code (Status::exitCode of
// the worst error of the job's start-up, or of this process's failure; 0 when it succeeded).
int trainUnderMpirun(const MpiTrainingOptions& options, const MpiTrainingReports& reports);

}  // namespace cleave::runtime
