// The op harness (in the style of ggml's test-backend-ops): every op declares its test cases once, in
// its family's tests/ops/<family>_cases.cpp; the harness runs each case through the op's reference,
// its CPU kernel, its CUDA kernel (where a GPU is present) and a finite-difference check of its
// gradient rule, and in perf mode times the kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ir/attribute.h"
#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave::op_harness {

// Tolerances of a comparison: |actual − expected| <= atol + rtol·|expected| (NaN matches NaN).
struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

// One test case of one op: operands, attributes and what to check.
struct OpCase {
  OpId op{};
  std::string label;                 // what the case exercises, e.g. "broadcast [3,1,5] x [4,1]"
  std::vector<TensorData> operands;
  AttrMap attrs;
  std::optional<Tolerance> tolerance;         // CPU kernel against reference; default: by result dtype
  std::optional<Tolerance> device_tolerance;  // CUDA kernel against reference; default: by result dtype
  bool gradient_check = true;              // run the finite-difference check where the op is differentiable
  std::string no_gradient_reason;          // why gradient_check is off (printed)
  bool perf = false;                       // a large case that perf mode times (test mode skips the gradient)
  std::vector<int> gradient_operands;      // operands to differentiate; empty: every float operand

  // Description used in failure messages: "<op> <label> (<operand types>)".
  std::string describe() const;
};

// The cases of one op family file; declared there, collected by allCases().
using CaseList = std::vector<OpCase>;

// Builds cases with random operands from one fixed seed (so every run sees the same tensors).
class CaseBuilder {
 public:
  explicit CaseBuilder(uint32_t seed) : rng_(seed) {}

  // Uniform floats in [low, high).
  TensorData uniform(DType dtype, Shape shape, double low = -1.0, double high = 1.0);
  // Floats in ±[low, high] with random signs (away from a kink at 0).
  TensorData awayFromZero(DType dtype, Shape shape, double low = 0.2, double high = 1.0);
  // Uniform integers in [low, high] (also bool with 0, 1).
  TensorData integers(DType dtype, Shape shape, int64_t low, int64_t high);
  // A tensor holding exactly `values`.
  static TensorData values(DType dtype, Shape shape, const std::vector<double>& values);

  // Appends a case and returns it for further settings.
  OpCase& add(OpId op, std::string label, std::vector<TensorData> operands, AttrMap attrs = {});
  // Appends a case whose gradient is not checked, saying why.
  OpCase& addWithoutGradient(OpId op, std::string label, std::vector<TensorData> operands, AttrMap attrs,
                             std::string reason);

  CaseList take() { return std::move(cases_); }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  CaseList cases_;
};

// ---- Running cases ----

// The result types of `c` from the op's shape rule.
Expected<std::vector<TensorType>> resultTypes(const OpCase& c);
// The reference results of `op` (OpDef::reference, where it supports these types); nullopt when the
// op has no reference for them.
std::optional<Expected<std::vector<TensorData>>> referenceResults(OpId op, const AttrMap& attrs,
                                                                  const std::vector<TensorData>& operands,
                                                                  const std::vector<TensorType>& result_types);
// One CPU kernel call of a case with its result buffers allocated, so that it can run (and be timed)
// repeatedly.
class CpuCall {
 public:
  // Prepares `c`'s call; errors: the case is invalid or the op has no CPU kernel.
  static Expected<CpuCall> prepare(const OpCase& c, int threads);
  // Runs the kernel once.
  Status run();
  // The results of the last run.
  std::vector<TensorData> results() const;

 private:
  const OpCase* case_ = nullptr;
  int threads_ = 1;
  std::vector<TensorType> operand_types_, result_types_;
  std::vector<std::vector<uint8_t>> buffers_;  // result bytes, with slack so empty results have a pointer
};
// Runs the op's CPU kernel on `c` (with `threads` threads).
Expected<std::vector<TensorData>> runCpuKernel(const OpCase& c, int threads = 2);
// The default tolerance of a kernel in `dtype` against the f64 reference (integers and bool: exact);
// `device_slack` widens it for the CUDA kernels (different summation orders and math libraries).
Tolerance defaultTolerance(DType dtype, bool device_slack = false);
// Compares `actual` with `expected` element by element; an empty string when they agree, else a
// message naming the first few differing elements.
std::string compareTensors(const TensorData& actual, const TensorData& expected, Tolerance tolerance);
// Checks `c`'s gradient rule against central differences of the op's reference (in f64): builds
// y = op(x..), loss = Σ reduce_sum(y · fixed random cotangent), runs autodiff and evaluates the graph
// with the CPU kernels. Returns an empty string when it agrees (or does not apply: `applies` says).
std::string checkGradient(const OpCase& c, bool& applies);
// Checks `c`'s sharding rule against its operand and result types: one dim list per operand and
// result, one entry per dim, each a factor of the rule (or none) whose size is the dim's. Returns an
// empty string when the rule is consistent, else what is wrong.
std::string checkShardingRule(const OpCase& c);

// Whether an op is declared not to be a kernel: a communication-family op, lowered to communication
// instructions (or a view) that the executor runs through its communicator.
bool isCommunicationOp(OpId op);

// ---- Perf mode ----

// Whether perf mode is on (environment variable CLEAVE_OP_HARNESS_PERF=1).
bool perfModeEnabled();
// Times `run` (repeated until about 10 ms have passed) and prints one line for `c`: microseconds
// per call and the op's bytes (GB/s) and FLOPs (GFLOP/s) from its cost rule.
void reportPerf(const OpCase& c, const std::string& backend, const std::function<Status()>& run);

}  // namespace cleave::op_harness
