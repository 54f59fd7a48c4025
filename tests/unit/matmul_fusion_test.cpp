// Unit tests of the folds into matrix products (passes/fusion/matmul_fusion.h) and of GELU's slope
// computed in the forward pass (passes/fusion/gelu_slope.h) on graphs whose nodes carry pipeline
// steps: nothing folds across a step, and new nodes take the step of the gelu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/fusion/gelu_slope.h"
#include "passes/fusion/matmul_fusion.h"
#include "tests/unit/graph_interpreter.h"

namespace cleave {
namespace {

Graph parse(std::string_view text) {
  auto graph = parseGraph(text, "t.cir");
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph{};
}

int countOps(const Graph& graph, OpId op) {
  int n = 0;
  for (const Node& node : graph.nodes) n += node.op == op;
  return n;
}

const char* kHeads = R"(graph @g {
  input %q.heads : f32[2,5,3,4]
  input %k.heads : f32[2,5,3,4]
  %q = transpose(%q.heads) {perm = [0, 2, 1, 3]}
  %k = transpose(%k.heads) {perm = [0, 2, 1, 3]}
  %scores = matmul(%q, %k) {transpose_b = 1}
  output %scores
})";

TEST(MatmulFusion, TransposesFoldOnlyWithinOnePipelineStep) {
  Graph same = parse(kHeads);
  std::vector<int64_t> steps = {0, 0, 0};
  auto folded = fuseIntoMatmuls(same, &steps);
  ASSERT_TRUE(folded) << folded.status().message();
  EXPECT_EQ(*folded, 2);
  EXPECT_EQ(countOps(same, OpId::transpose), 0);
  EXPECT_EQ(steps, std::vector<int64_t>{0});
  EXPECT_TRUE(verifyGraph(same)) << verifyGraph(same).message();

  // k's transpose in another step (a microbatch's backward, say) stays, and so does the product's
  // reading of it; q's folds.
  Graph split = parse(kHeads);
  steps = {0, 1, 0};
  folded = fuseIntoMatmuls(split, &steps);
  ASSERT_TRUE(folded) << folded.status().message();
  EXPECT_EQ(*folded, 1);
  EXPECT_EQ(countOps(split, OpId::transpose), 1);
  EXPECT_EQ(countOps(split, OpId::fused_matmul), 1);
  EXPECT_EQ(steps.size(), split.nodes.size());
  EXPECT_TRUE(verifyGraph(split)) << verifyGraph(split).message();
}

TEST(GeluSlope, NewNodesTakeTheStepOfTheGelu) {
  Graph graph = parse(R"(graph @g {
  input %x : f32[4,8]
  input %dy : f32[4,8]
  %g = gelu(%x)
  %dx = gelu_grad(%dy, %x)
  output %g, %dx
})");
  std::vector<int64_t> steps = {0, 1};  // the gelu forward, its gradient backward
  auto rewritten = computeGeluSlopeInForward(graph, &steps);
  ASSERT_TRUE(rewritten) << rewritten.status().message();
  EXPECT_EQ(*rewritten, 1);
  ASSERT_EQ(steps.size(), graph.nodes.size());
  EXPECT_TRUE(verifyGraph(graph)) << verifyGraph(graph).message();
  EXPECT_EQ(countOps(graph, OpId::gelu) + countOps(graph, OpId::gelu_grad), 0);
  // The forward's steps (its erf and exp among them) are in step 0, the gradient (a multiply by
  // the slope) in step 1, and each node's operands are defined before it.
  std::vector<bool> defined(graph.values.size(), false);
  for (ValueId v : graph.inputs) defined[v] = true;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    for (ValueId v : node.operands) EXPECT_TRUE(defined[v]) << "node " << i << " reads a value defined later";
    for (ValueId v : node.results) {
      defined[v] = true;
      EXPECT_EQ(graph.values[v].producer, static_cast<int32_t>(i));
    }
    if (node.op == OpId::erf || node.op == OpId::exp) EXPECT_EQ(steps[i], 0);
    if (!node.results.empty() && graph.values[node.results[0]].name == "dx") {
      EXPECT_EQ(node.op, OpId::mul);
      EXPECT_EQ(steps[i], 1);
    }
  }
  EXPECT_EQ(countOps(graph, OpId::erf), 1);
  EXPECT_EQ(countOps(graph, OpId::exp), 1);
}

// Both approximations: the rewritten steps (run by their own ops' kernels) give the gelu and the
// gradient of the gelu and gelu_grad kernels within rounding, over [-6, 6].
TEST(GeluSlope, StepsComputeWhatTheKernelsCompute) {
  for (const char* approximation : {"none", "tanh"}) {
    SCOPED_TRACE(approximation);
    const std::string text = std::string(R"(graph @g {
  input %x : f32[97]
  input %dy : f32[97]
  %g = gelu(%x) {approximate = ")") + approximation + R"("}
  %dx = gelu_grad(%dy, %x) {approximate = ")" + approximation + R"("}
  output %g, %dx
})";
    const Graph original = parse(text);
    Graph rewritten = parse(text);
    auto count = computeGeluSlopeInForward(rewritten);
    ASSERT_TRUE(count) << count.status().message();
    EXPECT_EQ(*count, 1);
    EXPECT_EQ(countOps(rewritten, OpId::gelu) + countOps(rewritten, OpId::gelu_grad), 0);
    EXPECT_EQ(countOps(rewritten, approximation == std::string("none") ? OpId::erf : OpId::tanh), 1);
    std::vector<double> x, dy;
    for (int i = 0; i < 97; ++i) {
      x.push_back(-6.0 + 12.0 * i / 96.0);
      dy.push_back(1.0 - 0.013 * i);
    }
    const test::TensorMap feeds = {{"x", test::makeTensor(TensorType{DType::kF32, {97}}, x)},
                                   {"dy", test::makeTensor(TensorType{DType::kF32, {97}}, dy)}};
    auto expected = test::evaluateGraph(original, feeds);
    auto got = test::evaluateGraph(rewritten, feeds);
    ASSERT_TRUE(expected) << expected.status().message();
    ASSERT_TRUE(got) << got.status().message();
    for (const char* name : {"g", "dx"}) {
      const std::vector<double> want = test::toDoubles(expected->at(name)), have = test::toDoubles(got->at(name));
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(have[i], want[i], 1e-6 * std::max(1.0, std::abs(want[i]))) << name << " at x = " << x[i];
    }
  }
}

}  // namespace
}  // namespace cleave
