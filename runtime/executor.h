// RankExecutor: runs one rank's programs of a plan on one device, over one planned arena.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"
#include "runtime/device.h"

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
  int64_t value_limit = 0;  // integer inputs: values lie in [0, value_limit) (0: unknown)
};

// A persistent tensor: a model weight or an optimizer state (momentum, moments, the step counter).
struct ParameterTensor {
  std::string name;
  TensorView view;
  bool trainable = false;
  bool optimizer_state = false;  // true for optimizer state, false for model weights
};

// How an executor runs kernels.
struct ExecutorOptions {
  int threads = 0;  // threads per kernel (BLAS and OpenMP too); 0: the hardware's concurrency
};

class PreparedProgram;

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
  Status initializeParameters();
  // Runs the program named `program` ("train", "eval", "infer") once.
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
  // The persistent tensors, in plan order.
  std::span<const ParameterTensor> parameters() const { return parameters_; }
  // One persistent tensor by name.
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

 private:
  RankExecutor(Device& device, int rank);
  Status prepare(const planpb::RankPlan& rank_plan);
  Expected<const PreparedProgram*> findProgram(std::string_view program) const;

  Device& device_;
  int rank_;
  int threads_ = 1;
  DeviceMemory arena_;
  std::vector<ParameterTensor> parameters_;
  struct ParameterInit;
  std::vector<ParameterInit> initializers_;  // parallel to parameters_
  std::vector<std::unique_ptr<PreparedProgram>> programs_;
};

// Prepares the executor of a single-device plan (one rank); kUsage for a plan over several devices,
// which needs a multi-device backend.
Expected<std::unique_ptr<RankExecutor>> createSingleDeviceExecutor(const planpb::Plan& plan, Device& device,
                                                                   const ExecutorOptions& options = {});

}  // namespace cleave::runtime
