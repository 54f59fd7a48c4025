// Unit tests of microbatching: the unrolled graph's structure, and (one stage, lowered and run by the
// executor) the loss and gradients of M microbatches against the full batch's.
#include "passes/partition/microbatching.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <span>

#include "ir/plan.pb.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/training/autodiff.h"
#include "passes/lowering/lower_to_plan.h"
#include "passes/partition/pipeline_backward.h"
#include "passes/lowering/pipeline_schedule.h"
#include "passes/partition/pipeline_stages.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "tests/unit/pipeline_test_support.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::TensorMap;

using test::parse;

TEST(MessageTags, ForwardAndGradientTagsAreDistinctAndDecode) {
  std::set<int64_t> tags;
  for (int64_t transfer = 0; transfer < 5; ++transfer)
    for (int m = 0; m < 3; ++m) {
      int64_t forward = microbatchTag(transfer, m, 3);
      EXPECT_TRUE(tags.insert(forward).second);
      EXPECT_TRUE(tags.insert(gradientTag(forward)).second);
      for (int64_t tag : {forward, gradientTag(forward)}) {
        EXPECT_EQ(tagMicrobatch(tag, 3), m);
        EXPECT_EQ(tagTransfer(tag, 3), transfer);
      }
      EXPECT_FALSE(isGradientTag(forward));
      EXPECT_TRUE(isGradientTag(gradientTag(forward)));
    }
}

TEST(Microbatching, ClonesPerMicrobatchNodesAndSharesTheRest) {
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    input %t : f32[2,3]
    param %w : f32[3,3] = zeros
    %wt = transpose(%w)
    %h = matmul(%x, %wt)
    %loss = mse(%h, %t)
    output %loss, %h
  })");
  auto unrolled = unrollMicrobatches(graph, 2);
  ASSERT_TRUE(unrolled) << unrolled.status().message();
  ASSERT_TRUE(verifyGraph(*unrolled)) << printGraph(*unrolled);
  EXPECT_EQ(printGraph(*unrolled), R"(graph @g {
  input %x : f32[4,3]
  input %t : f32[4,3]
  param %w : f32[3,3] = zeros
  %wt = transpose(%w) : f32[3,3]
  %x.mb0 = slice(%x) {axes = [0], ends = [2], starts = [0]} : f32[2,3]
  %t.mb0 = slice(%t) {axes = [0], ends = [2], starts = [0]} : f32[2,3]
  %h.mb0 = matmul(%x.mb0, %wt) : f32[2,3]
  %loss.mb0 = mse(%h.mb0, %t.mb0) : f32[]
  %x.mb1 = slice(%x) {axes = [0], ends = [4], starts = [2]} : f32[2,3]
  %t.mb1 = slice(%t) {axes = [0], ends = [4], starts = [2]} : f32[2,3]
  %h.mb1 = matmul(%x.mb1, %wt) : f32[2,3]
  %loss.mb1 = mse(%h.mb1, %t.mb1) : f32[]
  %add = add(%loss.mb0, %loss.mb1) : f32[]
  %loss.microbatches = constant() {value = dense<f32[]: [2]>} : f32[]
  %loss = div(%add, %loss.microbatches) : f32[]
  %h = concat(%h.mb0, %h.mb1) {axis = 0} : f32[4,3]
  output %loss, %h
}
)");
}

TEST(Microbatching, MessagesGetATagPerMicrobatch) {
  Graph graph = parse(R"(graph @g {
    param %w : f32[3,3] = zeros
    %a = recv() {dtype = "f32", peer_stage = 0, shape = [2, 3], tag = 1}
    %h = matmul(%a, %w)
    send(%h) {peer_stage = 2, tag = 4}
  })");
  auto unrolled = unrollMicrobatches(graph, 3);
  ASSERT_TRUE(unrolled) << unrolled.status().message();
  std::vector<int64_t> recv_tags, send_tags;
  for (const Node& node : unrolled->nodes) {
    if (node.op == OpId::recv) recv_tags.push_back(std::get<int64_t>(node.attrs.at("tag")));
    if (node.op == OpId::send) send_tags.push_back(std::get<int64_t>(node.attrs.at("tag")));
  }
  EXPECT_EQ(recv_tags, (std::vector<int64_t>{microbatchTag(1, 0, 3), microbatchTag(1, 1, 3), microbatchTag(1, 2, 3)}));
  EXPECT_EQ(send_tags, (std::vector<int64_t>{microbatchTag(4, 0, 3), microbatchTag(4, 1, 3), microbatchTag(4, 2, 3)}));
}

TEST(Microbatching, Errors) {
  Graph scalar_input = parse("graph @g {\n input %s : f32[]\n %e = exp(%s)\n output %e\n}\n");
  auto result = unrollMicrobatches(scalar_input, 2);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().message(), "microbatching: input '%s' has no batch dimension to split into microbatches");
  result = unrollMicrobatches(scalar_input, 0);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().kind(), ErrorKind::kUsage);
  Graph integer_scalar = parse(R"(graph @g {
    input %x : i64[2]
    %n = reduce_sum(%x) {keepdims = 0}
    output %n
  })");
  result = unrollMicrobatches(integer_scalar, 2);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().message(),
            "microbatching: output '%n' is a non-float scalar computed per microbatch; it cannot be combined");
}

// ---- One stage, lowered and run: M microbatches against the full batch ----

// Runs `graph` as the one program "train" of a one-device plan; returns its outputs by name.
TensorMap runOnTheExecutor(const Graph& graph, const TensorMap& feeds) {
  ProgramGraph program("train", &graph);
  LoweringInput input;
  input.programs = {program};
  input.model_name = "pipeline";
  auto plan = lowerToPlan(input);
  EXPECT_TRUE(plan) << plan.status().message();
  if (!plan) return {};
  auto device = runtime::createCpuDevice();
  auto executor = runtime::createSingleDeviceExecutor(*plan, *device, runtime::ExecutorOptions{1});
  EXPECT_TRUE(executor) << executor.status().message();
  if (!executor) return {};
  for (const runtime::ParameterTensor& param : (*executor)->parameters()) {
    const TensorData& data = feeds.at(param.name);
    EXPECT_EQ(data.type, param.view.type) << param.name;
    std::memcpy(param.view.data, data.bytes.data(), data.bytes.size());
  }
  const std::span<const runtime::NamedTensor> inputs = *(*executor)->inputs("train");
  for (const runtime::NamedTensor& in : inputs) {
    const TensorData& data = feeds.at(in.name);
    EXPECT_EQ(data.type, in.view.type) << in.name;
    std::memcpy(in.view.data, data.bytes.data(), data.bytes.size());
  }
  Status ran = (*executor)->run("train");
  EXPECT_TRUE(ran) << ran.message();
  TensorMap results;
  const std::span<const runtime::NamedTensor> outputs = *(*executor)->outputs("train");
  for (const runtime::NamedTensor& out : outputs) {
    TensorData data{out.view.type, std::vector<uint8_t>(static_cast<size_t>(out.view.type.bytes()))};
    std::memcpy(data.bytes.data(), out.view.data, data.bytes.size());
    results[out.name] = std::move(data);
  }
  return results;
}

// Makes every parameter gradient of `graph` an output, after the loss.
void outputParameterGradients(Graph& graph) {
  for (const Param& param : graph.params) {
    ValueId grad = graph.findValue(gradientName(graph.values[param.value].name));
    if (grad != kNoValue) graph.outputs.push_back(grad);
  }
}

TEST(Microbatching, LossAndGradientsOfMicrobatchesEqualTheFullBatchOnes) {
  constexpr int64_t kBatch = 8;
  Graph full = test::pipelineMlp(kBatch);
  const TensorMap feeds = test::randomFeeds(full, 4, 11);
  ASSERT_TRUE(appendBackward(full, full.outputs[0]));
  outputParameterGradients(full);
  const TensorMap expected = runOnTheExecutor(full, feeds);
  ASSERT_EQ(expected.size(), 1 + 2 * 4u);  // the loss and four layers' weights and biases

  for (int microbatches : {1, 2, 4})
    for (PipelineScheduleKind kind : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::kOneForwardOneBackward}) {
      SCOPED_TRACE("M=" + std::to_string(microbatches) + " " + std::string(pipelineScheduleName(kind)));
      // The whole model is stage 0 of 1, built at the microbatch size.
      Graph micro = test::pipelineMlp(kBatch / microbatches);
      StageCostModel costs;
      costs.node_costs.assign(micro.nodes.size(), 1.0);
      auto assignment = assignStages(micro, 1, costs);
      ASSERT_TRUE(assignment) << assignment.status().message();
      auto stage = extractStage(micro, *assignment, 0);
      ASSERT_TRUE(stage) << stage.status().message();
      auto unrolled = unrollMicrobatches(stage->graph, microbatches);
      ASSERT_TRUE(unrolled) << unrolled.status().message();
      Graph& graph = *unrolled;
      ASSERT_TRUE(appendPipelineBackward(graph, stage->boundary, microbatches));
      outputParameterGradients(graph);
      auto labels = orderNodesBySchedule(graph, 0, microbatches, stageSchedule(kind, 0, 1, microbatches));
      ASSERT_TRUE(labels) << labels.status().message();
      Status valid = verifyGraph(graph);
      ASSERT_TRUE(valid) << valid.message() << "\n" << printGraph(graph);
      const TensorMap actual = runOnTheExecutor(graph, feeds);
      ASSERT_EQ(actual.size(), expected.size());
      for (const auto& [name, tensor] : expected) {
        ASSERT_TRUE(actual.count(name)) << name;
        test::expectClose(actual.at(name), tensor, 1e-5, name);
      }
    }
}

}  // namespace
}  // namespace cleave
