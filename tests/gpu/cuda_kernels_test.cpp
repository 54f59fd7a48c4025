// GPU tests of the CUDA kernel table: its op set against the CPU's, and optimizer updates equal to the
// CPU's bit for bit. (Every op's cases run on CUDA in the op harness, tests/ops.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_kernels.h"
#include "tests/gpu/cuda_test_support.h"
#include "tests/unit/cpu_kernel_test_support.h"

namespace cleave::runtime {
namespace {

using cuda_test::context;
using cuda_test::DeviceBuffer;

using kernel_test::HostTensor;
using kernel_test::randomTensor;

// Runs op's CUDA kernel on copies of `operands`; results come back to host tensors.
std::vector<HostTensor> runOnGpu(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs) {
  std::vector<TensorType> operand_types;
  for (const HostTensor* t : operands) operand_types.push_back(t->type);
  auto result_types = inferResultTypes(opDef(op), operand_types, attrs);
  if (!result_types) {
    ADD_FAILURE() << opName(op) << ": " << result_types.status().message();
    return {};
  }
  CudaKernel kernel = findCudaKernel(op);
  if (!kernel) {
    ADD_FAILURE() << "no cuda kernel for " << opName(op);
    return {};
  }
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<const void*> inputs;
  for (const HostTensor* t : operands) {
    buffers.push_back(std::make_unique<DeviceBuffer>(t->type.bytes()));
    EXPECT_EQ(cudaMemcpy(buffers.back()->data, t->bytes(), static_cast<size_t>(t->type.bytes()), cudaMemcpyHostToDevice),
              cudaSuccess);
    inputs.push_back(buffers.back()->data);
  }
  std::vector<void*> outputs;
  for (const TensorType& type : *result_types) {
    buffers.push_back(std::make_unique<DeviceBuffer>(type.bytes()));
    // Garbage (NaN bytes for floats) where a kernel forgets to write.
    EXPECT_EQ(cudaMemset(buffers.back()->data, 0xFF, static_cast<size_t>(std::max<int64_t>(type.bytes(), 8))), cudaSuccess);
    outputs.push_back(buffers.back()->data);
  }
  KernelCall call{OpContext{opDef(op), operand_types, *result_types, attrs}, inputs, outputs};
  const Status status = kernel(call, context());
  EXPECT_TRUE(status.isOk()) << opName(op) << ": " << status.message();
  EXPECT_EQ(cudaStreamSynchronize(context().compute()), cudaSuccess) << opName(op);
  std::vector<HostTensor> results;
  for (size_t i = 0; i < result_types->size(); ++i) {
    results.emplace_back((*result_types)[i]);
    EXPECT_EQ(cudaMemcpy(results.back().bytes(), outputs[i], static_cast<size_t>((*result_types)[i].bytes()),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return results;
}

// Expects op's CUDA results to equal its CPU results within rtol/atol (exactly for integers).
void expectMatchesCpu(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs = {},
                      double rtol = 1e-4, double atol = 1e-5) {
  std::string what = std::string(opName(op));
  for (const HostTensor* t : operands) what.append(" ").append(t->type.str());
  const std::vector<HostTensor> expected = kernel_test::run(op, operands, attrs);
  const std::vector<HostTensor> actual = runOnGpu(op, operands, attrs);
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].type, actual[i].type) << what;
    const bool exact = !isFloat(expected[i].type.dtype);
    kernel_test::expectClose(actual[i], expected[i].values(), exact ? 0 : rtol, exact ? 0 : atol,
                             what + " result " + std::to_string(i));
  }
}

TEST(CudaKernels, TableHasTheCpuTablesOps) {
  CLEAVE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    EXPECT_EQ(findCpuKernel(op) != nullptr, findCudaKernel(op) != nullptr) << opName(op);
  }
}

// Every op's cases (shapes, attributes, dtypes, edge cases) run through its CUDA kernel in the op
// harness (tests/ops/op_harness_cuda_test.cpp); here: the table's op set and the bit-exact updates.

TEST(CudaKernels, OptimizerUpdates) {
  CLEAVE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  const Shape shape = {1031};
  const HostTensor w = randomTensor(DType::kF32, shape, rng), g = randomTensor(DType::kF32, shape, rng);
  const HostTensor buffer = randomTensor(DType::kF32, shape, rng);
  const HostTensor m = randomTensor(DType::kF32, shape, rng), v = randomTensor(DType::kF32, shape, rng, 0, 1);
  for (int64_t taken : {0, 3}) {
    const HostTensor step = kernel_test::makeTensor(DType::kI64, {}, {static_cast<double>(taken)});
    // f32 sgd: the same operations with fused multiply-adds in the same places: bitwise equal.
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step}, {{"lr", 0.1}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step}, {{"lr", 0.1}, {"weight_decay", 0.01}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step, &buffer},
                     {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.001}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step, &buffer},
                     {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", int64_t{1}}}, 0, 0);
    expectMatchesCpu(OpId::adamw_update, {&w, &g, &m, &v, &step}, {}, 1e-6, 1e-7);
    expectMatchesCpu(OpId::adamw_update, {&w, &g, &m, &v, &step}, {{"lr", 0.01}, {"weight_decay", 0.1}}, 1e-6, 1e-7);
    const HostTensor dw = randomTensor(DType::kF64, shape, rng), dg = randomTensor(DType::kF64, shape, rng);
    const HostTensor dm = randomTensor(DType::kF64, shape, rng), dv = randomTensor(DType::kF64, shape, rng, 0, 1);
    expectMatchesCpu(OpId::adamw_update, {&dw, &dg, &dm, &dv, &step}, {}, 1e-13, 1e-15);
  }
}

// Reductions of few results over many elements are split into chunks merged in order (the
// harness's cases are too small to split): the bias gradients of a convolution (results apart in
// memory: a block per chunk) and of a linear layer (results adjacent: a thread per chunk), a whole
// tensor, and integers, against the CPU.
TEST(CudaKernels, ReductionsOfFewLongGroups) {
  CLEAVE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const HostTensor images = randomTensor(DType::kF32, {64, 8, 900}, rng);
  const HostTensor rows = randomTensor(DType::kF32, {3000, 40}, rng);
  const HostTensor flat = randomTensor(DType::kF32, {200001}, rng);
  const HostTensor integers = randomTensor(DType::kI64, {5000, 3}, rng, -1000, 1000);
  for (OpId op : {OpId::reduce_sum, OpId::reduce_mean, OpId::reduce_max}) {
    expectMatchesCpu(op, {&images}, {{"axes", std::vector<int64_t>{0, 2}}}, 1e-6, 1e-6);
    expectMatchesCpu(op, {&rows}, {{"axes", std::vector<int64_t>{0}}}, 1e-6, 1e-6);
    expectMatchesCpu(op, {&flat}, {}, 1e-6, 1e-6);
  }
  expectMatchesCpu(OpId::reduce_sum, {&integers}, {{"axes", std::vector<int64_t>{0}}});
}

}  // namespace
}  // namespace cleave::runtime
