// The op harness on the CUDA kernels: every op's cases (the same ones the CPU harness runs) through
// its CUDA kernel against the op's reference, or against the CPU kernel where the reference does
// not take the dtypes (f16, bf16 casts); perf mode (CLEAVE_OP_HARNESS_PERF=1) times them. Every
// test skips, naming why, without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "tests/gpu/cuda_test_support.h"
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {
namespace {

using cuda_test::context;
using cuda_test::DeviceBuffer;

// A case's operands and results in device memory, with a call that runs its CUDA kernel.
class DeviceCase {
 public:
  explicit DeviceCase(const OpCase& c) : case_(c) {
    types_ = resultTypes(c).value();
    for (const TensorData& t : c.operands) {
      operand_types_.push_back(t.type);
      buffers_.push_back(std::make_unique<DeviceBuffer>(t.type.bytes()));
      EXPECT_EQ(cudaMemcpy(buffers_.back()->data, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
      inputs_.push_back(buffers_.back()->data);
    }
    for (const TensorType& type : types_) {
      buffers_.push_back(std::make_unique<DeviceBuffer>(type.bytes()));
      // Garbage (NaN bytes for floats) where a kernel forgets to write.
      EXPECT_EQ(cudaMemset(buffers_.back()->data, 0xFF, static_cast<size_t>(std::max<int64_t>(type.bytes(), 8))), cudaSuccess);
      outputs_.push_back(buffers_.back()->data);
    }
  }

  // Runs the kernel and waits for it.
  Status run() {
    runtime::CudaKernel kernel = runtime::findCudaKernel(case_.op);
    if (!kernel) return Status::internal("no cuda kernel for " + std::string(opName(case_.op)));
    runtime::KernelCall call{OpContext{opDef(case_.op), operand_types_, types_, case_.attrs}, inputs_, outputs_};
    CLEAVE_TRY(kernel(call, context()));
    if (cudaStreamSynchronize(context().compute()) != cudaSuccess) return Status::internal("cudaStreamSynchronize failed");
    return Status::ok();
  }

  // The results, copied back to the host.
  std::vector<TensorData> results() const {
    std::vector<TensorData> out;
    for (size_t i = 0; i < types_.size(); ++i) {
      out.push_back(TensorData{types_[i], std::vector<uint8_t>(static_cast<size_t>(types_[i].bytes()))});
      EXPECT_EQ(cudaMemcpy(out.back().bytes.data(), outputs_[i], out.back().bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  const OpCase& case_;
  std::vector<TensorType> operand_types_, types_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<const void*> inputs_;
  std::vector<void*> outputs_;
};

std::vector<OpId> allOps() {
  std::vector<OpId> ops;
  for (const OpDef& def : allOpDefs()) ops.push_back(def.id);
  return ops;
}

class CudaOpHarness : public ::testing::TestWithParam<OpId> {};

TEST_P(CudaOpHarness, CudaKernelMatchesReference) {
  CLEAVE_SKIP_WITHOUT_GPU();
  const OpId op = GetParam();
  if (isCommunicationOp(op)) {
    EXPECT_EQ(runtime::findCudaKernel(op), nullptr) << opName(op) << " is communication, not a kernel";
    return;
  }
  ASSERT_NE(runtime::findCudaKernel(op), nullptr) << "no cuda kernel for " << opName(op);
  auto it = casesByOp().find(op);
  ASSERT_TRUE(it != casesByOp().end()) << opName(op) << " has no harness cases";
  for (const OpCase& c : it->second) {
    SCOPED_TRACE(c.describe());
    auto types = resultTypes(c);
    ASSERT_TRUE(types) << "invalid case: " << types.status().message();
    DeviceCase device(c);
    const Status status = device.run();
    ASSERT_TRUE(status) << "cuda kernel: " << status.message();
    const std::vector<TensorData> actual = device.results();
    auto reference = referenceResults(c.op, c.attrs, c.operands, *types);
    std::vector<TensorData> expected;
    if (reference) {
      ASSERT_TRUE(*reference) << "reference: " << reference->status().message();
      expected = **reference;
    } else {
      auto cpu = runCpuKernel(c);  // no reference for these dtypes: the CPU kernel is the reference
      ASSERT_TRUE(cpu) << "cpu kernel: " << cpu.status().message();
      expected = *cpu;
    }
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t r = 0; r < actual.size(); ++r) {
      const Tolerance tolerance = c.device_tolerance.value_or(defaultTolerance(actual[r].type.dtype, true));
      const std::string diff = compareTensors(actual[r], expected[r], tolerance);
      EXPECT_TRUE(diff.empty()) << "result " << r << (reference ? " against the reference: " : " against the cpu: ") << diff;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, CudaOpHarness, ::testing::ValuesIn(allOps()),
                         [](const ::testing::TestParamInfo<OpId>& info) { return std::string(opName(info.param)); });

// Perf mode: CUDA kernel time per case (inputs already on the device).
TEST(CudaOpHarnessPerf, KernelTimes) {
  CLEAVE_SKIP_WITHOUT_GPU();
  if (!perfModeEnabled()) GTEST_SKIP() << "perf mode: set CLEAVE_OP_HARNESS_PERF=1";
  for (const auto& [op, list] : casesByOp())
    for (const OpCase& c : list) {
      DeviceCase device(c);
      reportPerf(c, "cuda", [&] { return device.run(); });
    }
}

}  // namespace
}  // namespace cleave::op_harness
