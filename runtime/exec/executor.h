// RankExecutor: runs one rank's programs of a plan on one device, over one planned arena.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/held_layout.h"
#include "ir/status.h"
#include "ir/tensor_type.h"
#include "runtime/device/device.h"

namespace cleave {
namespace planpb {
class Plan;
class RankPlan;
}  // namespace planpb
}  // namespace cleave

namespace cleave::runtime {

// A tensor in an arena: where its bytes are and its type.
struct TensorView {
  void* data = nullptr;
  TensorType type;
};

// A program input or output, by name.
struct NamedTensor {
  std::string name;
  TensorView view;
  int64_t value_limit = 0;   // integer inputs: values lie in [0, value_limit) (0: unknown)
  int64_t batch_offset = 0;  // multi-device plans: the global batch row where this rank's rows start
};

// A persistent tensor: a model weight or an optimizer state (momentum, moments, the step counter).
struct ParameterTensor {
  std::string name;
  TensorView view;
  bool trainable = false;
  bool optimizer_state = false;  // true for optimizer state, false for model weights
  // Set when this rank holds one block of a tensor split over devices: the whole tensor's shape and
  // where the block starts in it. Empty: the view is the whole tensor.
  Shape full_shape;
  Shape shard_offset;
  // Set (model.shape) when the plan holds the tensor in another layout than the model's: reshaped,
  // or grouped (ir/held_layout.h, planpb::Parameter::model_shape). full_shape is in the held shape.
  HeldLayout model;
};

class Communicator;
class RankActivity;

// How an executor runs kernels and communicates.
struct ExecutorOptions {
  int threads = 0;  // threads per kernel (BLAS and OpenMP too); 0: the hardware's concurrency
  // This rank's endpoint for SEND, RECV and collective instructions (it must outlive the executor);
  // nullptr: a plan with such instructions is refused, as is one with a synchronous communicator
  // (local, MPI: host memory) on a device the host cannot access.
  Communicator* communicator = nullptr;
};

class PreparedProgram;
struct PreparedInstruction;
class CommunicationQueue;
class ExecutionTrace;

// Runs one rank of a plan: allocates the rank's arena on a device, prepares every instruction of
// every program once (op, types, attributes, data pointers, kernel), then runs programs by name.
// Programs share the arena; parameters and optimizer state live in its persistent region.
class RankExecutor {
 public:
  // Prepares rank `rank_index` of `plan` (which validatePlan accepted) on `device`, which must
  // outlive the executor. Errors name the rank, instruction and its source.
  static Expected<std::unique_ptr<RankExecutor>> create(const planpb::Plan& plan, int rank_index, Device& device,
                                                        const ExecutorOptions& options = {});
  ~RankExecutor();
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  // Fills every parameter from its initializer (weights) or with its initial state (optimizer state).
  // A block of a split tensor gets the values the whole tensor's initializer gives that block.
  Status initializeParameters();
  // Runs the program named `program` ("train", "eval", "infer") once. Kernels, copies and
  // stream-0 communication run in program order on the calling thread; stream-1 communication
  // (SEND, RECV, collectives) runs in program order on the rank's communication thread while later
  // kernels go on, and a kernel that touches the bytes of a pending transfer waits for it first.
  // With an asynchronous communicator (NCCL) every instruction is enqueued from the calling thread
  // and a kernel touching the bytes of an issued transfer makes the device wait for it. Returns
  // once the device has finished (Device::synchronize). On an error the communicator is aborted,
  // so the other ranks stop too. Call it from one thread at a time.
  Status run(std::string_view program);

  // True when the plan has a program named `program`.
  bool hasProgram(std::string_view program) const;
  // Names of the programs, in plan order.
  std::vector<std::string> programNames() const;
  // The inputs / outputs of `program`, in plan order; kUsage when there is no such program.
  Expected<std::span<const NamedTensor>> inputs(std::string_view program) const;
  Expected<std::span<const NamedTensor>> outputs(std::string_view program) const;
  // One input / output of `program` by name; kBadInput naming what exists when it is missing.
  Expected<TensorView> input(std::string_view program, std::string_view name) const;
  Expected<TensorView> output(std::string_view program, std::string_view name) const;
  // The persistent tensors, in plan order. Handing out their views counts as writing them: kernels
  // drop what they prepared from constant weights (KernelCall::constant_operands).
  std::span<const ParameterTensor> parameters() const;
  // One persistent tensor by name (as parameters(), a write as far as kernels know).
  Expected<TensorView> parameter(std::string_view name) const;

  // The rank this executor runs.
  int rank() const { return rank_; }
  // The device the arena lives on.
  Device& device() const { return device_; }
  // Bytes of the arena (every program's buffers and the persistent region).
  int64_t arenaBytes() const { return arena_.bytes(); }
  // Sets the threads per kernel (0: hardware concurrency); also sets BLAS's and OpenMP's counts.
  void setThreads(int threads);
  // The threads per kernel in use.
  int threads() const { return threads_; }
  // Records every instruction run from now on (both streams) in `trace`, which must outlive the
  // runs; null stops recording. Call it between runs.
  void setTrace(ExecutionTrace* trace);

 private:
  RankExecutor(Device& device, int rank);
  Status prepare(const planpb::Plan& plan, const planpb::RankPlan& rank_plan);
  Expected<const PreparedProgram*> findProgram(std::string_view program) const;
  Status runInstructions(const PreparedProgram& program);
  Status runWithAsynchronousCommunicator(const PreparedProgram& program);
  // Runs or enqueues one instruction on the calling thread.
  Status runHere(PreparedInstruction& inst);
  // Marks which kernel operands are parameters no instruction writes (after every program is prepared).
  void markConstantOperands(const std::vector<std::pair<const uint8_t*, const uint8_t*>>& written);
  // Gives the parameters a new generation: what kernels prepared from constant operands is stale.
  void parametersMayHaveChanged() const;

  Device& device_;
  int rank_;
  int threads_ = 1;
  Communicator* communicator_ = nullptr;
  RankActivity* activity_;  // what this rank runs now, for other ranks' stall warnings (rank_activity.h)
  bool asynchronous_ = false;  // the communicator is asynchronous (no communication thread)
  DeviceMemory arena_;
  std::vector<ParameterTensor> parameters_;
  struct ParameterInit;
  std::vector<ParameterInit> initializers_;  // parallel to parameters_
  std::vector<std::unique_ptr<PreparedProgram>> programs_;
  std::unique_ptr<CommunicationQueue> queue_;  // the communication thread; null when no stream-1 instruction exists
  ExecutionTrace* trace_ = nullptr;
  mutable uint64_t constants_generation_ = 0;  // see KernelCall::constants_generation
};

// Prepares the executor of a single-device plan (one rank) without a communicator; kUsage for a
// plan over several devices, which runs through a RankGroup (runtime/exec/rank_group.h).
Expected<std::unique_ptr<RankExecutor>> createSingleDeviceExecutor(const planpb::Plan& plan, Device& device,
                                                                   const ExecutorOptions& options = {});

}  // namespace cleave::runtime
