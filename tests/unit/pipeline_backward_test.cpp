// Unit tests of seeded autodiff and of pipelined training: stage graphs run together (sends and
// receives through a mailbox) compute the one-device loss and gradients.
#include "passes/partition/pipeline_backward.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/training/autodiff.h"
#include "passes/partition/microbatching.h"
#include "passes/lowering/pipeline_schedule.h"
#include "runtime/device/kernel.h"
#include "tests/unit/pipeline_test_support.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::TensorMap;

using test::parse;

// ---- Seeded autodiff ----

const char* kExpOfProduct = R"(graph @g {
  input %x : f64[3]
  input %c : f64[3]
  param %w : f64[3] = zeros
  %y = mul(%x, %w)
  %z = exp(%y)
  output %z
})";

TEST(SeededBackward, CotangentsGiveVectorJacobianProductsForParametersAndValues) {
  Graph graph = parse(kExpOfProduct);
  const ValueId x = graph.findValue("x"), c = graph.findValue("c"), z = graph.findValue("z");
  SeededBackwardOptions options;
  options.seeds = {{z, c}};
  options.wrt_values = {x};
  auto gradients = appendSeededBackward(graph, options);
  ASSERT_TRUE(gradients) << gradients.status().message();
  ASSERT_EQ(gradients->size(), 1u);
  ASSERT_NE((*gradients)[0], kNoValue);
  ASSERT_TRUE(verifyGraph(graph)) << printGraph(graph);
  graph.outputs = {(*gradients)[0], graph.findValue("w.grad")};
  const std::vector<double> xs = {0.5, -1, 2}, cs = {1, 2, -3}, ws = {0.3, 0.7, -0.2};
  TensorMap feeds = {{"x", test::makeTensor({DType::kF64, {3}}, xs)},
                     {"c", test::makeTensor({DType::kF64, {3}}, cs)},
                     {"w", test::makeTensor({DType::kF64, {3}}, ws)}};
  auto values = test::evaluateGraph(graph, feeds);
  ASSERT_TRUE(values) << values.status().message();
  std::vector<double> x_grad = test::toDoubles(values->at(graph.values[(*gradients)[0]].name));
  std::vector<double> w_grad = test::toDoubles(values->at("w.grad"));
  for (int i = 0; i < 3; ++i) {
    const double dz = cs[i] * std::exp(xs[i] * ws[i]);
    EXPECT_DOUBLE_EQ(x_grad[i], dz * ws[i]);
    EXPECT_DOUBLE_EQ(w_grad[i], dz * xs[i]);
  }
}

TEST(SeededBackward, SeveralSeedsAddUp) {
  // d/dw of (c·exp(xw) + sum(y)) with seeds on z (cotangent c) and on the loss (1).
  Graph graph = parse(R"(graph @g {
    input %x : f64[3]
    input %c : f64[3]
    param %w : f64[3] = zeros
    %y = mul(%x, %w)
    %z = exp(%y)
    %loss = reduce_sum(%y) {keepdims = 0}
    output %loss
  })");
  SeededBackwardOptions options;
  options.seeds = {{graph.findValue("z"), graph.findValue("c")}, {graph.findValue("loss"), kNoValue}};
  ASSERT_TRUE(appendSeededBackward(graph, options));
  graph.outputs = {graph.findValue("w.grad")};
  TensorMap feeds = {{"x", test::makeTensor({DType::kF64, {3}}, {1, 2, 3})},
                     {"c", test::makeTensor({DType::kF64, {3}}, {1, 1, 1})},
                     {"w", test::makeTensor({DType::kF64, {3}}, {0, 0, 0})}};
  auto values = test::evaluateGraph(graph, feeds);
  ASSERT_TRUE(values) << values.status().message();
  // exp(0) = 1: each element's gradient is x + x.
  EXPECT_EQ(test::toDoubles(values->at("w.grad")), (std::vector<double>{2, 4, 6}));
}

TEST(SeededBackward, SeedsDependingOnNothingDifferentiatedAddNothing) {
  Graph graph = parse(R"(graph @g {
    input %x : f32[3]
    input %c : f32[3]
    %z = exp(%x)
    output %z
  })");
  const std::string before = printGraph(graph);
  SeededBackwardOptions options;
  options.seeds = {{graph.findValue("z"), graph.findValue("c")}};
  auto gradients = appendSeededBackward(graph, options);
  ASSERT_TRUE(gradients) << gradients.status().message();
  EXPECT_TRUE(gradients->empty());
  EXPECT_EQ(printGraph(graph), before);
}

TEST(SeededBackward, Errors) {
  Graph graph = parse(kExpOfProduct);
  SeededBackwardOptions options;
  options.seeds = {{graph.findValue("z"), graph.findValue("w")}};
  options.seeds[0].cotangent = graph.findValue("y");  // right type: accepted
  EXPECT_TRUE(appendSeededBackward(graph, options));
  Graph mismatched = parse(R"(graph @g {
    input %c : f64[2]
    param %w : f64[3] = zeros
    %z = exp(%w)
    output %z
  })");
  options.seeds = {{mismatched.findValue("z"), mismatched.findValue("c")}};
  auto result = appendSeededBackward(mismatched, options);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().message(), "autodiff: the cotangent of '%z' is not a value of its type f64[3]");
  // A non-differentiable op between a received value and a seeded one.
  Graph blocked = parse(R"(graph @g {
    input %dy : f32[3]
    input %c : f32[3]
    %r = recv() {dtype = "f32", peer_stage = 0, shape = [3], tag = 0}
    %g = relu_grad(%dy, %r)
    output %g
  })");
  SeededBackwardOptions through_recv;
  through_recv.seeds = {{blocked.findValue("g"), blocked.findValue("c")}};
  through_recv.wrt_values = {blocked.findValue("r")};
  result = appendSeededBackward(blocked, through_recv);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().message(),
            "t.cir:5:5: relu_grad '%g': op 'relu_grad' is not differentiable, but it lies between the value '%r' and "
            "the differentiated value '%g'");
}

// ---- Pipelined training, simulated ----

// Runs the stage graphs together: each stage runs its nodes in order with the CPU kernels; a send
// leaves its tensor in a mailbox (it never waits), a receive waits until its message is there.
// Returns each stage's values by name.
std::vector<TensorMap> runStages(const std::vector<Graph>& stages, const TensorMap& feeds) {
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // from stage, to stage, tag
  std::map<Key, TensorData> mailbox;
  std::vector<std::vector<TensorData>> values(stages.size());
  std::vector<size_t> next(stages.size(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    const Graph& graph = stages[s];
    values[s].resize(graph.values.size());
    for (ValueId v : graph.inputs) values[s][v] = feeds.at(graph.values[v].name);
    for (const Param& p : graph.params) values[s][p.value] = feeds.at(graph.values[p.value].name);
  }
  auto tagOf = [](const Node& node, const char* name) { return std::get<int64_t>(node.attrs.at(name)); };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < stages.size(); ++s) {
      const Graph& graph = stages[s];
      for (; next[s] < graph.nodes.size(); ++next[s], progress = true) {
        const Node& node = graph.nodes[next[s]];
        if (node.op == OpId::recv) {
          auto it = mailbox.find({tagOf(node, "peer_stage"), static_cast<int64_t>(s), tagOf(node, "tag")});
          if (it == mailbox.end()) break;
          values[s][node.results[0]] = std::move(it->second);
          mailbox.erase(it);
          continue;
        }
        if (node.op == OpId::send) {
          Key key{static_cast<int64_t>(s), tagOf(node, "peer_stage"), tagOf(node, "tag")};
          EXPECT_FALSE(mailbox.count(key)) << "two messages with tag " << std::get<2>(key);
          mailbox[key] = values[s][node.operands[0]];
          continue;
        }
        runtime::CpuKernel kernel = runtime::findCpuKernel(node.op);
        EXPECT_NE(kernel, nullptr) << opName(node.op);
        if (!kernel) return {};
        std::vector<TensorType> operand_types, result_types;
        std::vector<const void*> inputs;
        std::vector<void*> outputs;
        for (ValueId v : node.operands) {
          operand_types.push_back(graph.values[v].type);
          inputs.push_back(values[s][v].bytes.data());
        }
        for (ValueId r : node.results) {
          result_types.push_back(graph.values[r].type);
          values[s][r] = TensorData{graph.values[r].type, std::vector<uint8_t>(graph.values[r].type.bytes())};
          outputs.push_back(values[s][r].bytes.data());
        }
        Status ran = kernel({OpContext{opDef(node.op), operand_types, result_types, node.attrs}, inputs, outputs, 1});
        EXPECT_TRUE(ran) << nodeContext(graph, node) << ran.message();
      }
    }
  }
  for (size_t s = 0; s < stages.size(); ++s)
    EXPECT_EQ(next[s], stages[s].nodes.size()) << "stage " << s << " waits forever at node " << next[s];
  EXPECT_TRUE(mailbox.empty()) << mailbox.size() << " messages nobody received";
  std::vector<TensorMap> by_name(stages.size());
  for (size_t s = 0; s < stages.size(); ++s)
    for (size_t v = 0; v < values[s].size(); ++v) by_name[s][stages[s].values[v].name] = values[s][v];
  return by_name;
}

// The in-step labels of `labels` with consecutive repeats merged: the order steps ran in.
std::vector<PipelineStep> stepsInOrder(const std::vector<PipelineNodeLabel>& labels) {
  std::vector<PipelineStep> steps;
  for (const PipelineNodeLabel& label : labels) {
    if (label.microbatch < 0) continue;
    PipelineStep step{label.backward, label.microbatch};
    if (steps.empty() || !(steps.back() == step)) steps.push_back(step);
  }
  return steps;
}

struct PipelineCase {
  const char* model;
  int stages;
  int microbatches;
  PipelineScheduleKind schedule;
};

std::string caseName(const ::testing::TestParamInfo<PipelineCase>& info) {
  return std::string(info.param.model) + "_pp" + std::to_string(info.param.stages) + "_m" +
         std::to_string(info.param.microbatches) + "_" +
         (info.param.schedule == PipelineScheduleKind::kGPipe ? "gpipe" : "1f1b");
}

class PipelineTraining : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(PipelineTraining, StagesComputeTheOneDeviceLossAndGradients) {
  const PipelineCase& c = GetParam();
  const bool gpt = std::string(c.model) == "gpt";
  constexpr int64_t kBatch = 8;
  auto model = [&](int64_t batch) { return gpt ? test::pipelineGpt(batch) : test::pipelineMlp(batch); };
  // 1. The one-device reference: the full batch's loss and gradients.
  Graph full = model(kBatch);
  const TensorMap feeds = test::randomFeeds(full, gpt ? 11 : 4, 3);
  ASSERT_TRUE(appendBackward(full, full.outputs[0]));
  auto expected = test::evaluateGraph(full, feeds);
  ASSERT_TRUE(expected) << expected.status().message();
  // 2. Each stage: extracted from the microbatch-sized forward graph, unrolled, differentiated, ordered.
  Graph micro = model(kBatch / c.microbatches);
  StageCostModel costs;
  costs.node_costs.assign(micro.nodes.size(), 1.0);
  auto assignment = assignStages(micro, c.stages, costs);
  ASSERT_TRUE(assignment) << assignment.status().message();
  std::vector<Graph> stage_graphs;
  for (int s = 0; s < c.stages; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    auto stage = extractStage(micro, *assignment, s);
    ASSERT_TRUE(stage) << stage.status().message();
    auto unrolled = unrollMicrobatches(stage->graph, c.microbatches);
    ASSERT_TRUE(unrolled) << unrolled.status().message();
    Graph& graph = *unrolled;
    ASSERT_TRUE(verifyGraph(graph)) << printGraph(graph);
    Status backward = appendPipelineBackward(graph, stage->boundary, c.microbatches);
    ASSERT_TRUE(backward) << backward.message();
    const std::vector<PipelineStep> schedule = stageSchedule(c.schedule, s, c.stages, c.microbatches);
    auto labels = orderNodesBySchedule(graph, s, c.microbatches, schedule);
    ASSERT_TRUE(labels) << labels.status().message();
    Status valid = verifyGraph(graph);
    ASSERT_TRUE(valid) << valid.message() << "\n" << printGraph(graph);
    EXPECT_EQ(stepsInOrder(*labels), schedule);
    EXPECT_EQ(*labels, labelPipelineNodes(graph, s, c.microbatches));
    stage_graphs.push_back(std::move(graph));
  }
  // 3. Run together, the stages give the reference's loss and every parameter's gradient once.
  std::vector<TensorMap> actual = runStages(stage_graphs, feeds);
  ASSERT_EQ(actual.size(), stage_graphs.size());
  test::expectClose(actual.back().at("loss"), expected->at("loss"), 1e-5, "loss");
  // A gradient that is zero but for rounding (attention's key bias: a softmax ignores what adds to
  // a whole row) is compared at the scale of the others: its noise follows the order of float
  // sums, which microbatches and each CPU's BLAS kernels change (1e-9 on AMD's, where Intel's gave
  // exactly the reference's).
  double largest_gradient = 0;
  for (const Param& param : full.params)
    for (double x : test::toDoubles(expected->at(gradientName(full.values[param.value].name))))
      largest_gradient = std::max(largest_gradient, std::abs(x));
  for (const Param& param : full.params) {
    const std::string grad = gradientName(full.values[param.value].name);
    int holders = 0;
    for (size_t s = 0; s < actual.size(); ++s)
      if (stage_graphs[s].findValue(grad) != kNoValue) {
        ++holders;
        test::expectClose(actual[s].at(grad), expected->at(grad), 1e-5, grad + " on stage " + std::to_string(s),
                          1e-3 * largest_gradient);
      }
    EXPECT_EQ(holders, 1) << grad;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pipelines, PipelineTraining,
    ::testing::Values(PipelineCase{"mlp", 2, 4, PipelineScheduleKind::kGPipe},
                      PipelineCase{"mlp", 2, 4, PipelineScheduleKind::kOneForwardOneBackward},
                      PipelineCase{"mlp", 3, 2, PipelineScheduleKind::kOneForwardOneBackward},
                      PipelineCase{"mlp", 4, 8, PipelineScheduleKind::kOneForwardOneBackward},
                      PipelineCase{"mlp", 2, 1, PipelineScheduleKind::kGPipe},
                      PipelineCase{"gpt", 2, 4, PipelineScheduleKind::kGPipe},
                      PipelineCase{"gpt", 3, 4, PipelineScheduleKind::kOneForwardOneBackward}),
    caseName);

TEST(PipelineBackward, NoGradientMessagesForValuesWithoutParametersBefore) {
  // Stage 0 only applies relu to the input: nothing flows back to it.
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %a = relu(%x)
    %h = matmul(%a, %w)
    %loss = reduce_sum(%h) {keepdims = 0}
    output %loss
  })");
  StageAssignment assignment{2, {0, 1, 1}, {}, {}};
  for (int s = 0; s < 2; ++s) {
    auto stage = extractStage(graph, assignment, s);
    ASSERT_TRUE(stage) << stage.status().message();
    auto unrolled = unrollMicrobatches(stage->graph, 2);
    ASSERT_TRUE(unrolled);
    const size_t forward_sends_and_recvs = 2;
    ASSERT_TRUE(appendPipelineBackward(*unrolled, stage->boundary, 2));
    size_t messages = 0;
    for (const Node& node : unrolled->nodes) messages += node.op == OpId::send || node.op == OpId::recv;
    EXPECT_EQ(messages, forward_sends_and_recvs) << printGraph(*unrolled);
    EXPECT_EQ(unrolled->findValue("w.grad") != kNoValue, s == 1);
  }
}

TEST(PipelineBackward, RejectsTagsOfNoTransfer) {
  Graph graph = parse(R"(graph @g {
    param %w : f32[3,3] = zeros
    %a = recv() {dtype = "f32", peer_stage = 0, shape = [2, 3], tag = 14}
    %h = matmul(%a, %w)
    %loss = reduce_sum(%h) {keepdims = 0}
    output %loss
  })");
  StageBoundary boundary{1, 2, {}, {}};
  Status status = appendPipelineBackward(graph, boundary, 1);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "t.cir:3:5: recv '%a': tag 14 belongs to no transfer of stage 1");
}

}  // namespace
}  // namespace cleave
