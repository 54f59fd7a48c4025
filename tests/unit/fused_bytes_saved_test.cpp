// What inspect reports a fused node saves (ops::fusedBytesSaved): the bytes its steps would move as
// separate kernels, a run of steps of one tensor alone counted as one kernel, less the node's own.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/op_table.h"
#include "ir/ops/fused_ops.h"

namespace cleave {
namespace {

double savedBytes(const std::vector<TensorType>& operands, const std::string& body) {
  AttrMap attrs{{"body", body}};
  auto results = inferResultTypes(opDef(OpId::fused), operands, attrs);
  EXPECT_TRUE(results) << results.status().message();
  return results ? ops::fusedBytesSaved(OpContext{opDef(OpId::fused), operands, *results, attrs}) : -1;
}

const TensorType kRows{DType::kF32, {512, 1024}};  // 2 MiB
const TensorType kBias{DType::kF32, {1024}};
constexpr double kMiB = 1 << 20;

// bias + relu: the add reads 2 MiB + the bias and writes 2 MiB, the relu reads and writes 2 MiB; the
// fused node moves 2 MiB + the bias + 2 MiB. Saved: the intermediate's write and read.
TEST(FusedBytesSaved, ATwoKernelChainSavesItsIntermediate) {
  EXPECT_DOUBLE_EQ(savedBytes({kRows, kBias}, "t0 = add(x0, x1); t1 = relu(t0); return t1"), 4 * kMiB);
}

// The GELU with its slope, written as the 12 steps of its formula (passes/fusion/gelu_slope.h), is
// the work of one gelu kernel: read x, write the GELU and the slope. With the bias add before it the
// steps as separate kernels move 4 + 6 MiB, the fused node 6: 4 MiB saved, not the 54 MiB of 13
// kernels each reading and writing a whole tensor (what inspect reported before).
TEST(FusedBytesSaved, AFormulaOfOneTensorCountsAsOneKernel) {
  const std::string gelu_and_slope =
      "t0 = add(x0, x1); t1 = mul(t0, 0.7071067690849304); t2 = erf(t1); t3 = add(1, t2); t4 = mul(t0, 0.5); "
      "t5 = mul(0.5, t3); t6 = mul(-0.5, t0); t7 = mul(t6, t0); t8 = exp(t7); t9 = mul(t8, 0.3989422917366028); "
      "t10 = mul(t0, t9); t11 = add(t5, t10); t12 = mul(t4, t3); return t11, t12";
  EXPECT_NEAR(savedBytes({kRows, kBias}, gelu_and_slope), 4 * kMiB, 1.0);
}

// Two tensors in every step (a residual add into a scaled sum): each step is a kernel of its own.
TEST(FusedBytesSaved, StepsOfTwoTensorsStayKernelsOfTheirOwn) {
  // add: 2+2 read, 2 written; mul by x1 again: 2+2 read, 2 written; fused: 4 read, 2 written.
  EXPECT_DOUBLE_EQ(savedBytes({kRows, kRows}, "t0 = add(x0, x1); t1 = mul(t0, x1); return t1"), 6 * kMiB);
}

}  // namespace
}  // namespace cleave
