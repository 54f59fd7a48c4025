// Unit tests of GELU's slope computed in the forward pass (passes/fusion/gelu_slope.h): new nodes
// take the pipeline step of the gelu, and the steps compute what the gelu and gelu_grad kernels do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ir/verifier.h"
#include "passes/fusion/gelu_slope.h"
#include "tests/unit/graph_interpreter.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::countOps;
using test::parse;

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
