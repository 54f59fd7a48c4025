// Tests for the graph summary: op histogram, parameter totals, FLOPs from the cost rules, text form.
#include "ir/graph_summary.h"

#include <gtest/gtest.h>

#include "frontend/model_generators.h"

namespace cleave {
namespace {

TEST(GraphSummary, CountsOpsParametersAndFlopsOfTheMlp) {
  auto graph = generateMlp(MlpSpec{});
  ASSERT_TRUE(graph) << graph.status().message();
  GraphSummary s = summarizeGraph(*graph);
  EXPECT_EQ(s.graph_name, "mlp");
  EXPECT_EQ(s.node_count, 8);
  using OpCount = std::pair<std::string, int64_t>;
  // Most frequent first; ties in name order.
  EXPECT_EQ(s.op_counts, (std::vector<OpCount>{{"add", 3}, {"matmul", 3}, {"relu", 2}}));
  EXPECT_EQ(s.parameter_tensors, 6);
  EXPECT_EQ(s.parameter_count, 669706);
  EXPECT_EQ(s.parameter_bytes, 669706 * 4);
  ASSERT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(s.inputs[0].name, "x");
  ASSERT_EQ(s.outputs.size(), 1u);
  EXPECT_EQ(s.outputs[0].type, (TensorType{DType::kF32, {128, 10}}));
  // The three matmuls alone are 2*B*(784*512 + 512*512 + 512*10) FLOPs; adds and relus add a little.
  const double matmul_flops = 2.0 * 128 * (784 * 512 + 512 * 512 + 512 * 10);
  EXPECT_GE(s.forward_flops, matmul_flops);
  EXPECT_LT(s.forward_flops, matmul_flops * 1.01);
  EXPECT_GT(s.forward_bytes, 669706.0 * 4);  // every weight is read at least once
  EXPECT_DOUBLE_EQ(s.training_step_flops, 3 * s.forward_flops);
}

TEST(GraphSummary, TextNamesTheTotals) {
  auto graph = generateMlp(MlpSpec{});
  ASSERT_TRUE(graph);
  std::string text = summaryText(summarizeGraph(*graph));
  EXPECT_NE(text.find("graph @mlp"), std::string::npos) << text;
  EXPECT_NE(text.find("%x : f32[128,784]"), std::string::npos) << text;
  EXPECT_NE(text.find("669,706"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul 3"), std::string::npos) << text;
  // 2*128*668,672 for the matmuls + 263,424 for the adds and relus
  EXPECT_NE(text.find("forward pass:  171.44 MFLOP"), std::string::npos) << text;
  EXPECT_NE(text.find("estimate"), std::string::npos) << text;
}

// Frozen parameters (buffers, --freeze) are counted apart, and named in the text only when there are any.
TEST(GraphSummary, CountsFrozenParameters) {
  auto graph = generateMlp(MlpSpec{});
  ASSERT_TRUE(graph);
  EXPECT_EQ(summaryText(summarizeGraph(*graph)).find("frozen"), std::string::npos);
  graph->params[1].trainable = false;  // fc1's bias, 512 elements
  GraphSummary s = summarizeGraph(*graph);
  EXPECT_EQ(s.frozen_tensors, 1);
  EXPECT_EQ(s.frozen_count, graph->values[graph->params[1].value].type.numel());
  EXPECT_NE(summaryText(s).find("; " + withThousands(s.frozen_count) + " in 1 tensor frozen"), std::string::npos)
      << summaryText(s);
}

TEST(GraphSummary, NumberFormats) {
  EXPECT_EQ(withThousands(0), "0");
  EXPECT_EQ(withThousands(999), "999");
  EXPECT_EQ(withThousands(1000), "1,000");
  EXPECT_EQ(withThousands(669706), "669,706");
  EXPECT_EQ(withThousands(-1234567), "-1,234,567");
  EXPECT_EQ(withMetricPrefix(512, "FLOP"), "512 FLOP");
  EXPECT_EQ(withMetricPrefix(1.5e12, "FLOP"), "1.50 TFLOP");
  EXPECT_EQ(withBinaryPrefix(100), "100 bytes");
  EXPECT_EQ(withBinaryPrefix(2678824), "2.55 MiB");
}

}  // namespace
}  // namespace cleave
