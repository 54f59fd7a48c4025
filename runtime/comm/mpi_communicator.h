// MpiCommunicator: the ranks of a plan as the processes of an MPI job (mpirun), one rank each.
#pragma once

#include <memory>

#include "ir/status.h"
#include "runtime/comm/communicator.h"

namespace cleave::runtime {

// This process's place in an MPI job: MPI is initialized (with MPI_THREAD_MULTIPLE: the rank's
// compute and communication threads both call it) while the object lives.
class MpiJob {
 public:
  // Initializes MPI; kRuntime when it cannot start or lacks MPI_THREAD_MULTIPLE.
  static Expected<std::unique_ptr<MpiJob>> join();
  // Finalizes MPI after a run that succeeded. After markFailed() MPI is left as it is (a dead peer
  // could make MPI_Finalize wait forever): the process exits and mpirun ends the job.
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  // This process's rank in MPI_COMM_WORLD.
  int rank() const { return rank_; }
  // The number of processes.
  int size() const { return size_; }
  // The number of the job's processes on this host (they share its cores).
  int localSize() const { return local_size_; }
  // Records that this process failed: the destructor then skips MPI_Finalize.
  void markFailed() { failed_ = true; }

  // The communicator endpoint of this process's rank (destroy it before the job). Collectives follow
  // the local communicator's algorithms and summation order (collective_algorithms.h), so they give
  // bitwise its results, over non-blocking MPI point-to-point messages polled against a deadline of
  // `timeout_seconds`. A timeout pings every rank to name the one at fault (dead: it does not answer;
  // else the rank the others wait for). While it lives, SIGTERM (mpirun stopping the job after a rank
  // died) makes the process name the ranks that no longer answer on stderr and exit with status 3.
  // A wait of `stall_seconds` (then twice, four times as long...) pings the ranks and prints a
  // warning naming the rank that holds it up and what that rank is doing (0: no warnings).
  Expected<std::unique_ptr<Communicator>> createCommunicator(double timeout_seconds, double stall_seconds = 0);

 private:
  MpiJob(int rank, int size, int local_size) : rank_(rank), size_(size), local_size_(local_size) {}
  int rank_;
  int size_;
  int local_size_;
  bool failed_ = false;
};

}  // namespace cleave::runtime
