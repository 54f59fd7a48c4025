// Unit tests of compileModel's use of the cluster: pipeline stages are balanced for its devices.
#include "passes/core/compile_pipeline.h"

#include <gtest/gtest.h>

#include "ir/plan.pb.h"
#include "ir/text_format.h"

namespace cleave {
namespace {

// A matmul, a chain of elementwise ops, three more matmuls: 10 nodes, 4 of them the arithmetic.
constexpr const char* kMatmulsAroundElementwise = R"(graph @g {
  input %x : f32[64,512]
  param %w1 : f32[512,512] = xavier_uniform
  param %w2 : f32[512,512] = xavier_uniform
  param %w3 : f32[512,512] = xavier_uniform
  param %w4 : f32[512,512] = xavier_uniform
  %h = matmul(%x, %w1) : f32[64,512]
  %a1 = tanh(%h) : f32[64,512]
  %a2 = tanh(%a1) : f32[64,512]
  %a3 = tanh(%a2) : f32[64,512]
  %a4 = tanh(%a3) : f32[64,512]
  %a5 = tanh(%a4) : f32[64,512]
  %a6 = tanh(%a5) : f32[64,512]
  %b = matmul(%a6, %w2) : f32[64,512]
  %c = matmul(%b, %w3) : f32[64,512]
  %y = matmul(%c, %w4) : f32[64,512]
  output %y
}
)";

// The matmuls of the first stage (rank 0's inference program) when compiled for `cluster` on 2 stages.
int firstStageMatmuls(const ClusterSpec& cluster) {
  auto model = parseGraph(kMatmulsAroundElementwise, "g.cir");
  if (!model) {
    ADD_FAILURE() << model.status().message();
    return -1;
  }
  CompileOptions options;
  options.model_file = "g.cir";
  options.pp = 2;
  options.cluster = cluster;
  auto plan = compileModel(*model, options);
  EXPECT_TRUE(plan) << plan.status().message();
  if (!plan) return -1;
  int kernels = 0;
  for (const planpb::Instruction& inst : plan->ranks(0).programs(0).instructions())
    kernels += inst.kind() == planpb::KERNEL && inst.op() == "matmul" ? 1 : 0;
  return kernels;
}

TEST(CompileModel, BalancesPipelineStagesForTheClustersDevices) {
  auto base = builtinCluster("cpu-local");
  ASSERT_TRUE(base);
  base->device.kernel_efficiency.clear();
  // Devices where every kernel takes the same fixed time: the 10 nodes split 5 and 5.
  ClusterSpec overhead_only = *base;
  overhead_only.device.peak_flops = {{DType::kF32, 1e30}};
  overhead_only.device.memory_bandwidth = 1e30;
  overhead_only.device.kernel_overhead_s = 1e-3;
  // Devices where only arithmetic takes time: two matmuls per stage.
  ClusterSpec arithmetic_only = *base;
  arithmetic_only.device.memory_bandwidth = 1e30;
  arithmetic_only.device.kernel_overhead_s = 0;
  EXPECT_EQ(firstStageMatmuls(overhead_only), 1);
  EXPECT_EQ(firstStageMatmuls(arithmetic_only), 2);
}

}  // namespace
}  // namespace cleave
