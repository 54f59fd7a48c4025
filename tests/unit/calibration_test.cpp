// Unit tests of the calibration measurements (runtime/exec/calibration.h) that cleave calibrate builds on.
#include "runtime/exec/calibration.h"

#include <gtest/gtest.h>

#include "ir/plan.h"

namespace cleave::runtime {
namespace {

TEST(Calibration, TheCommunicationPlanIsValidAndRuns) {
  for (bool all_reduce : {true, false}) {
    planpb::Plan plan = communicationPlan(all_reduce, 3, 16, true);
    Status valid = validatePlan(plan);
    EXPECT_TRUE(valid.isOk()) << valid.message();
    EXPECT_EQ(plan.ranks_size(), 2);
    auto seconds = communicationSeconds(all_reduce, 16, true, 0.001);
    ASSERT_TRUE(seconds.hasValue()) << seconds.status().message();
    EXPECT_GT(*seconds, 0);
  }
}

TEST(Calibration, KernelsAreCollectedOncePerSignatureAndTimed) {
  std::vector<CountedKernel> kernels;
  ASSERT_TRUE(collectCpuKernels(communicationPlan(true, 4, 16, true).ranks(0), "train", kernels).isOk());
  ASSERT_EQ(kernels.size(), 1u);  // the add reading each all-reduce's result
  EXPECT_EQ(kernels[0].count, 4);
  EXPECT_EQ(kernels[0].kernel.signature(), "add f32[16] f32[16] -> f32[16]");
  // Collecting again adds to the counts of the kernels already there.
  ASSERT_TRUE(collectCpuKernels(communicationPlan(false, 2, 16, true).ranks(1), "train", kernels).isOk());
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].count, 6);
  EXPECT_EQ(collectCpuKernels(communicationPlan(true, 1, 16, true).ranks(0), "infer", kernels).kind(),
            ErrorKind::kBadInput);

  auto seconds = kernelSeconds(kernels[0].kernel, 2, 0.001);
  ASSERT_TRUE(seconds.hasValue()) << seconds.status().message();
  EXPECT_GT(*seconds, 0);
}

TEST(Calibration, AKernelInstanceTakesItsResultTypesFromTheShapeRule) {
  auto gemm = KernelInstance::of(OpId::matmul, {{DType::kF32, {4, 8}}, {DType::kF32, {8, 2}}});
  ASSERT_TRUE(gemm.hasValue()) << gemm.status().message();
  EXPECT_EQ(gemm->results, (std::vector<TensorType>{{DType::kF32, {4, 2}}}));
  EXPECT_FALSE(KernelInstance::of(OpId::matmul, {{DType::kF32, {4, 8}}, {DType::kF32, {4, 2}}}).hasValue());
}

}  // namespace
}  // namespace cleave::runtime
