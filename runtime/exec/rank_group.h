// RankGroup: all ranks of a plan run together, one device, executor and thread per rank, and the
// moves of global batches in and out of the ranks' inputs and outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"

namespace cleave {
namespace planpb {
class Plan;
}  // namespace planpb
}  // namespace cleave

namespace cleave::runtime {

// How the ranks of a group in one process talk to each other.
enum class RankBackend {
  kLocal,  // local communicators over host memory (one thread per rank)
  kNccl,   // NCCL between GPUs, rank r on GPU r (builds with CUDA only)
};

// How a group runs its ranks.
struct RankGroupOptions {
  int threads = 0;               // kernel threads of all ranks together (0: the hardware's concurrency);
                                 // each rank gets max(1, threads / ranks)
  double timeout_seconds = 300;  // the longest a send, receive or collective waits for another rank
  double stall_seconds = 0;      // a wait this long warns which rank holds it up and what it does (0: never)
  std::string device = "cpu";    // "cpu", "cuda" or "cuda:N": the device of rank 0 (rank r: GPU N + r)
  RankBackend backend = RankBackend::kLocal;
};

// The ranks of one plan. A group made by create() owns a device, an executor and a thread per
// rank and connects them through local (cpu) or NCCL (cuda) communicators; a group made by wrap()
// borrows one executor and runs on the calling thread.
class RankGroup {
 public:
  // Prepares every rank of `plan` (which validatePlan accepted) on options.device. kUsage for a
  // multi-rank plan on cuda without the nccl backend, or the nccl backend on the cpu; kRuntime when
  // there are fewer GPUs than ranks. Errors name the rank.
  static Expected<std::unique_ptr<RankGroup>> create(const planpb::Plan& plan, const RankGroupOptions& options = {});
  // A group of one around `executor` (which must outlive the group).
  static std::unique_ptr<RankGroup> wrap(RankExecutor& executor);
  // Prepares only the rank of `communicator` (communicator.rank()) of `plan`, for one process of a
  // multi-process run; the group runs its one rank on the calling thread. The plan's other ranks run
  // in other processes; what GlobalBatch and checkpoints need to know of them comes from `plan`.
  // `communicator` carries the group's own host-memory collectives (losses, evaluation sums,
  // checkpoint barriers); the rank's instructions use `device_communicator` when given (NCCL on
  // `device`), else `communicator`. The rank runs on `device` (null: a cpu device of the group's
  // own). The communicators and the device must outlive the group.
  static Expected<std::unique_ptr<RankGroup>> createForProcess(const planpb::Plan& plan, Communicator& communicator,
                                                               const RankGroupOptions& options = {},
                                                               Device* device = nullptr,
                                                               Communicator* device_communicator = nullptr);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  // The number of ranks.
  int size() const { return static_cast<int>(executors_.size()); }
  // The executor of rank `rank` (0 <= rank < size()).
  RankExecutor& executor(int rank) const { return *executors_[static_cast<size_t>(rank)]; }

  // Runs job(executor) for every rank at once, each on its rank's thread. When a rank's job fails,
  // the communicator is aborted so the others stop promptly; the result is the error of the rank
  // that stopped the communicator (the others' errors only say that it failed), else the lowest
  // failed rank's, or ok when every job succeeded. A rank still running one timeout after another
  // finished is stuck: the communicator is aborted (kRemoteRank naming it). A rank still running one
  // timeout after the communicator was aborted (stuck in a kernel, say) is left running: the error
  // is returned anyway, and the group refuses later jobs (kRemoteRank) and leaks its ranks rather
  // than wait for it.
  Status forEachRank(const std::function<Status(RankExecutor&)>& job);
  // Runs `program` on every rank at once.
  Status run(std::string_view program);
  // Runs every rank's parameter initializers.
  Status initializeParameters();
  // Sets the kernel threads of all ranks together (0: the hardware's concurrency): each rank gets
  // max(1, threads / size()).
  void setThreads(int threads);
  // True when every rank has a program named `program`.
  bool hasProgram(std::string_view program) const;
  // The lowest rank whose `program` has the output `name`, and that output; kBadInput naming what
  // the program outputs when no rank has it.
  Expected<std::pair<RankExecutor*, TensorView>> firstOutput(std::string_view program, std::string_view name) const;
  // Bytes of each rank's arena, by rank.
  std::vector<int64_t> arenaBytes() const;

  // True when the plan's other ranks run in other processes (a group made by createForProcess()).
  bool spansProcesses() const { return process_plan_ != nullptr; }
  // The plan of a group that spans processes (nullptr otherwise).
  const planpb::Plan* processPlan() const { return process_plan_; }
  // The endpoint of this process's rank in a group that spans processes.
  Communicator& processCommunicator() const { return *process_communicator_; }
  // Tells the other ranks (threads or processes) that this group failed with `error`, so that they
  // stop waiting for it.
  void abort(const Status& error);

 private:
  RankGroup() = default;
  struct Worker;
  void startWorkers();
  void workerLoop(size_t rank);

  std::vector<std::unique_ptr<Device>> devices_;  // create()'s devices, or createForProcess()'s own cpu
  std::vector<std::unique_ptr<Communicator>> communicators_;
  std::vector<std::unique_ptr<RankExecutor>> owned_executors_;
  std::vector<RankExecutor*> executors_;  // by rank
  std::unique_ptr<Worker> worker_;        // the rank threads of a group of several ranks
  double timeout_seconds_ = 300;          // how long a rank waits for another
  // Set when a job was given up on while a rank was still running it (stuck outside the
  // communicator after the others failed): the group runs nothing more and is not torn down.
  bool abandoned_ = false;
  // CLEAVE_INJECT_FAULT: a rank made to fail or hang at one of its program runs (testing only).
  struct InjectedFault {
    bool hang = false;
    int rank = -1;
    int64_t run = 0;
  };
  static Expected<InjectedFault> injectedFaultFromEnvironment(int ranks);
  // Fails or hangs when the fault is set for `rank`'s program run number `run`.
  Status injectedFault(int rank, int64_t run) const;
  InjectedFault fault_;
  std::vector<int64_t> program_runs_;  // by rank: programs run so far
  const planpb::Plan* process_plan_ = nullptr;        // set by createForProcess()
  Communicator* process_communicator_ = nullptr;      // set by createForProcess()
};

// A tensor in host memory that owns its bytes.
struct HostTensor {
  TensorType type;
  std::vector<uint8_t> bytes;
};

// The global batch of one program's inputs: one tensor per input name, with dim 0 the global
// batch, that a data source or a file fills, and the copy of each rank's rows
// [batch_offset, batch_offset + rows) into that rank's input. The global tensors are host memory:
// an input only one rank takes whole is that rank's own buffer (no copy) when the rank's device is
// host-accessible, else staging memory of that device (pinned for cuda) copied in by scatter().
class GlobalBatch {
 public:
  // The global tensors of `program`'s inputs over every rank of `group` (which must outlive this),
  // or of the whole plan when the group spans processes (every process then fills the same global
  // batch and copies only its own rank's rows); kBadInput when ranks disagree about an input's dtype
  // or trailing dims.
  static Expected<std::unique_ptr<GlobalBatch>> create(RankGroup& group, std::string_view program);
  // The global tensors, by input name in order of first appearance (rank by rank).
  std::span<const NamedTensor> inputs() const { return inputs_; }
  // Copies `host_bytes` (the whole global tensor inputs()[index]) into it.
  Status write(size_t index, const void* host_bytes);
  // Copies every rank's rows of the global tensors into its inputs.
  Status scatter();

 private:
  // One copy of rows into a rank's input.
  struct RowCopy {
    Device* device = nullptr;
    void* target = nullptr;
    const void* source = nullptr;
    int64_t bytes = 0;
  };
  std::vector<NamedTensor> inputs_;
  std::vector<Device*> input_devices_;          // parallel to inputs_: the rank's device, or nullptr for host storage
  std::vector<std::vector<uint64_t>> storage_;  // the global tensors that are not a rank's own buffer
  std::vector<DeviceMemory> staging_;           // the same, in pinned memory, for devices the host cannot access
  std::vector<RowCopy> copies_;
};

// The device of this process's rank in an mpirun job for the device name `device` ("cpu", "cuda",
// "cuda:N"): for cuda, GPU (local rank % visible GPUs), the local rank from
// OMPI_COMM_WORLD_LOCAL_RANK (0 when unset); "cuda:N" names the GPU outright.
Expected<std::unique_ptr<Device>> createProcessDevice(std::string_view device);

// The inputs (or, with `outputs`, the outputs) of `program` on rank `rank` of `plan` as the plan
// describes them: names, types, value limits and batch offsets, with no data (for ranks that run in
// other processes); empty when the rank has no such program.
Expected<std::vector<NamedTensor>> describeRankTensors(const planpb::Plan& plan, int rank, std::string_view program,
                                                       bool outputs);

// Output `name` of `program` over the global batch, assembled on the host from the ranks that
// output it: rows by their batch offset, from the lowest rank that has them (replicas are read
// once); a scalar from the lowest rank. kBadInput when no rank outputs it, kInternal when the
// ranks leave rows uncovered.
Expected<HostTensor> gatherOutput(const RankGroup& group, std::string_view program, std::string_view name);

}  // namespace cleave::runtime
