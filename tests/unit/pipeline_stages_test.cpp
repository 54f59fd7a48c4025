// Unit tests of pipeline stage assignment (against brute force) and stage graph extraction.
#include "passes/partition/pipeline_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "frontend/model_generators.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "analysis/cost_model.h"
#include "passes/training/loss_head.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::parse;

// x -> relu -> relu -> ... (`length` nodes), loss = reduce_sum of the last.
Graph reluChain(int length) {
  Graph graph;
  ValueId v = *graph.addInput("x", {DType::kF32, {2, 4}});
  for (int i = 0; i < length; ++i) v = (*graph.addNode(OpId::relu, {v}))[0];
  graph.outputs = {v};
  return graph;
}

// ---- Stage assignment ----

struct Split {
  double slowest = 0;
  bool feasible = false;
};

// The best split of a chain (every node has work) by trying every placement of the stage borders.
Split bruteForce(int stages, const StageCostModel& model) {
  const int n = static_cast<int>(model.node_costs.size());
  Split best;
  best.slowest = std::numeric_limits<double>::infinity();
  std::vector<int> starts(stages + 1, n);  // starts[0] = 0, increasing, starts[stages] = n
  auto search = [&](auto&& self, int stage, int begin) -> void {
    if (stage == stages - 1) {
      starts[stage] = begin;
      double slowest = 0;
      for (int s = 0; s < stages; ++s) {
        double cost = 0;
        int64_t params = 0, activations = 0;
        for (int i = starts[s]; i < starts[s + 1]; ++i) {
          cost += model.node_costs[i];
          params += model.node_param_bytes[i];
          activations += model.node_activation_bytes[i];
        }
        int64_t memory = static_cast<int64_t>(model.param_memory_factor * static_cast<double>(params)) +
                         microbatchesInFlight(model.schedule, s, stages, model.num_microbatches) * activations;
        if (model.memory_limit_bytes > 0 && memory > model.memory_limit_bytes) return;
        slowest = std::max(slowest, cost);
      }
      best.feasible = true;
      best.slowest = std::min(best.slowest, slowest);
      return;
    }
    starts[stage] = begin;
    for (int end = begin + 1; end <= n - (stages - stage - 1); ++end) self(self, stage + 1, end);
  };
  if (stages <= n) search(search, 0, 0);
  return best;
}

TEST(AssignStages, MatchesBruteForceOnRandomChains) {
  std::mt19937 random(5);
  std::uniform_int_distribution<int> cost(1, 9), param_bytes(0, 100), activation_bytes(0, 40);
  int feasible_cases = 0, infeasible_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 8)(random);
    const int stages = std::uniform_int_distribution<int>(1, 4)(random);
    Graph graph = reluChain(n);
    StageCostModel model;
    for (int i = 0; i < n; ++i) {
      model.node_costs.push_back(cost(random));
      model.node_param_bytes.push_back(param_bytes(random));
      model.node_activation_bytes.push_back(activation_bytes(random));
    }
    model.param_memory_factor = trial % 2 ? 4.0 : 1.0;
    model.schedule = trial % 3 ? PipelineScheduleKind::kOneForwardOneBackward : PipelineScheduleKind::kGPipe;
    model.num_microbatches = std::uniform_int_distribution<int>(1, 6)(random);
    model.memory_limit_bytes = trial % 4 == 0 ? 0 : std::uniform_int_distribution<int>(100, 800)(random);
    SCOPED_TRACE("trial " + std::to_string(trial));
    Split expected = bruteForce(stages, model);
    auto assignment = assignStages(graph, stages, model);
    if (stages > n) {
      ASSERT_FALSE(assignment);
      EXPECT_EQ(assignment.status().message(),
                "pipeline stages: cannot split graph 'main' into " + std::to_string(stages) + " stages: only " +
                    std::to_string(n) + " of its nodes that depend on an input have work (a cost above 0)");
      continue;
    }
    if (!expected.feasible) {
      ASSERT_FALSE(assignment) << "a split fits although brute force found none";
      EXPECT_NE(assignment.status().message().find("fits the memory limit"), std::string::npos);
      ++infeasible_cases;
      continue;
    }
    ASSERT_TRUE(assignment) << assignment.status().message();
    ++feasible_cases;
    EXPECT_EQ(*std::max_element(assignment->stage_cost.begin(), assignment->stage_cost.end()), expected.slowest);
    // Stages are contiguous, in order, non-empty, within the limit, and their figures add up.
    ASSERT_EQ(assignment->node_stage.size(), static_cast<size_t>(n));
    EXPECT_EQ(assignment->node_stage.front(), 0);
    EXPECT_EQ(assignment->node_stage.back(), stages - 1);
    for (int i = 1; i < n; ++i) {
      int step = assignment->node_stage[i] - assignment->node_stage[i - 1];
      EXPECT_TRUE(step == 0 || step == 1);
    }
    for (int s = 0; s < stages; ++s) {
      double stage_cost = 0;
      for (int i = 0; i < n; ++i)
        if (assignment->node_stage[i] == s) stage_cost += model.node_costs[i];
      EXPECT_EQ(assignment->stage_cost[s], stage_cost);
      if (model.memory_limit_bytes > 0) {
        EXPECT_LE(assignment->stage_memory_bytes[s], model.memory_limit_bytes);
      }
    }
  }
  // Both outcomes occur, so the comparison covers the memory limit.
  EXPECT_GT(feasible_cases, 50);
  EXPECT_GT(infeasible_cases, 10);
}

TEST(AssignStages, MemoryLimitErrorNamesTheLeastMemoryNeeded) {
  Graph graph = reluChain(3);
  StageCostModel model;
  model.node_costs = {1, 1, 1};
  model.node_param_bytes = {100, 300, 100};
  model.node_activation_bytes = {0, 0, 0};
  model.param_memory_factor = 2;
  model.memory_limit_bytes = 500;
  // Two stages: the best is {100,300} | {100} or {100} | {300,100}: 800 bytes on the fullest stage.
  auto assignment = assignStages(graph, 2, model);
  ASSERT_FALSE(assignment);
  EXPECT_EQ(assignment.status().kind(), ErrorKind::kBadInput);
  EXPECT_EQ(assignment.status().message(),
            "pipeline stages: no split of graph 'main' into 2 stages fits the memory limit of 500 bytes per device; "
            "the split using the least memory needs 800 bytes on its fullest stage");
  // Three stages fit in 600 bytes each, although two stages would balance the cost equally well.
  model.memory_limit_bytes = 600;
  auto three = assignStages(graph, 3, model);
  ASSERT_TRUE(three) << three.status().message();
  EXPECT_EQ(three->node_stage, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(three->stage_memory_bytes, (std::vector<int64_t>{200, 600, 200}));
}

TEST(AssignStages, ActivationsCountOncePerMicrobatchInFlight) {
  Graph graph = reluChain(4);
  StageCostModel model;
  model.node_costs = {1, 1, 1, 1};
  model.node_activation_bytes = {10, 10, 10, 10};
  model.num_microbatches = 8;
  model.schedule = PipelineScheduleKind::kOneForwardOneBackward;
  auto assignment = assignStages(graph, 2, model);
  ASSERT_TRUE(assignment) << assignment.status().message();
  // 1F1B with two stages: stage 0 keeps 2 microbatches, stage 1 keeps 1.
  EXPECT_EQ(assignment->stage_memory_bytes, (std::vector<int64_t>{40, 20}));
  model.schedule = PipelineScheduleKind::kGPipe;
  assignment = assignStages(graph, 2, model);
  ASSERT_TRUE(assignment);
  EXPECT_EQ(assignment->stage_memory_bytes, (std::vector<int64_t>{160, 160}));
}

TEST(AssignStages, NodesWithoutWorkJoinTheNextNodeWithWork) {
  Graph graph = reluChain(6);
  StageCostModel model;
  model.node_costs = {0, 3, 0, 0, 3, 0};
  auto assignment = assignStages(graph, 2, model);
  ASSERT_TRUE(assignment) << assignment.status().message();
  EXPECT_EQ(assignment->node_stage, (std::vector<int>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(assignment->stage_cost, (std::vector<double>{3, 3}));
  auto too_many = assignStages(graph, 3, model);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.status().message(),
            "pipeline stages: cannot split graph 'main' into 3 stages: only 2 of its nodes that depend on an input "
            "have work (a cost above 0)");
}

// For virtual stages the split keeps each value within the stage after its own where some split
// within memory can: a = relu(x) read 3 nodes later (a residual) over 3 stages. Where none can, the
// balanced split stands (the virtual stage merge then names the value).
TEST(AssignStages, VirtualStagesAvoidValuesThatSkipAStage) {
  Graph graph;
  const ValueId x = *graph.addInput("x", {DType::kF32, {2, 4}});
  const ValueId a = (*graph.addNode(OpId::relu, {x}))[0];
  const ValueId b = (*graph.addNode(OpId::relu, {a}))[0];
  const ValueId c = (*graph.addNode(OpId::relu, {b}))[0];
  const ValueId d = (*graph.addNode(OpId::relu, {c}))[0];
  const ValueId e = (*graph.addNode(OpId::add, {a, d}))[0];
  graph.outputs = {(*graph.addNode(OpId::relu, {e}))[0]};
  StageCostModel model;
  model.node_costs = {1, 1, 1, 1, 1, 1};
  auto balanced = assignStages(graph, 3, model);
  ASSERT_TRUE(balanced) << balanced.status().message();
  EXPECT_EQ(balanced->node_stage, (std::vector<int>{0, 0, 1, 1, 2, 2}));  // a, made in 0, read in 2
  model.avoid_skipped_stages = true;
  auto kept = assignStages(graph, 3, model);
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_EQ(kept->node_stage, (std::vector<int>{0, 0, 1, 1, 1, 2}));  // a read in 0 (b) and 1 (e)
  // Over 5 stages every split leaves e two stages or more after a: a balanced split all the same.
  auto fallback = assignStages(graph, 5, model);
  ASSERT_TRUE(fallback) << fallback.status().message();
  EXPECT_EQ(*std::max_element(fallback->stage_cost.begin(), fallback->stage_cost.end()), 2);
}

// Stages split where the strategy search split them, named by their first node, whatever the
// balance by time would do.
TEST(AssignStages, AtGivenStartsSplitsThere) {
  Graph graph = reluChain(6);
  StageCostModel model;
  model.node_costs = {1, 1, 1, 1, 1, 1};
  auto name = [&](int node) { return graph.values[graph.nodes[node].results[0]].name; };
  auto at = assignStagesAt(graph, 3, {name(1), name(5)}, model);
  ASSERT_TRUE(at) << at.status().message();
  EXPECT_EQ(at->node_stage, (std::vector<int>{0, 1, 1, 1, 1, 2}));
  EXPECT_EQ(at->stage_cost, (std::vector<double>{1, 4, 1}));
  // Balanced, the same chain splits 2 / 2 / 2.
  auto balanced = assignStages(graph, 3, model);
  ASSERT_TRUE(balanced);
  EXPECT_EQ(balanced->node_stage, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  // Errors: a name no node defines, starts out of order, the wrong count.
  auto unknown = assignStagesAt(graph, 2, {"nowhere"}, model);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.status().message(), "pipeline stages: no node of work '%nowhere' to start a stage at");
  auto backwards = assignStagesAt(graph, 3, {name(4), name(2)}, model);
  ASSERT_FALSE(backwards);
  EXPECT_NE(backwards.status().message().find("starts before the one before it ends"), std::string::npos);
  auto first = assignStagesAt(graph, 2, {name(0)}, model);
  ASSERT_FALSE(first);
  EXPECT_FALSE(assignStagesAt(graph, 3, {name(2)}, model));
}

TEST(AssignStages, RejectsCostVectorsOfTheWrongSize) {
  Graph graph = reluChain(3);
  StageCostModel model;
  model.node_costs = {1, 1};
  auto assignment = assignStages(graph, 2, model);
  ASSERT_FALSE(assignment);
  EXPECT_EQ(assignment.status().message(),
            "pipeline stages: the cost model has 2 costs, 0 parameter sizes and 0 activation sizes for 3 nodes");
}

TEST(AssignStages, ParameterBytesCountOnceAtTheFirstUser) {
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %wt = transpose(%w)
    %a = matmul(%x, %wt)
    %b = matmul(%a, %w)
    output %b
  })");
  EXPECT_EQ(parameterBytesByFirstUser(graph), (std::vector<int64_t>{36, 0, 0}));
  EXPECT_EQ(nodeResultBytes(graph), (std::vector<int64_t>{36, 24, 24}));
  // The transposed weight depends on no input: its parameter bytes count at its user %a, and it
  // goes to the stage of its first user.
  StageCostModel model;
  model.node_costs = {5, 1, 1};
  model.node_param_bytes = parameterBytesByFirstUser(graph);
  auto assignment = assignStages(graph, 2, model);
  ASSERT_TRUE(assignment) << assignment.status().message();
  EXPECT_EQ(assignment->node_stage, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(assignment->stage_memory_bytes, (std::vector<int64_t>{36, 0}));
}

// ---- Stage extraction ----

// The node producing value `name` in `graph`, or nullptr.
const Node* producerOf(const Graph& graph, const std::string& name) {
  ValueId v = graph.findValue(name);
  return v == kNoValue || graph.values[v].producer < 0 ? nullptr : &graph.nodes[graph.values[v].producer];
}

int64_t intAttr(const Node& node, const char* name) { return std::get<int64_t>(node.attrs.at(name)); }

std::vector<PipelineStage> extractAll(const Graph& graph, const StageAssignment& assignment) {
  std::vector<PipelineStage> stages;
  for (int s = 0; s < assignment.num_stages; ++s) {
    auto stage = extractStage(graph, assignment, s);
    EXPECT_TRUE(stage) << stage.status().message();
    if (!stage) return {};
    Status valid = verifyGraph(stage->graph);
    EXPECT_TRUE(valid) << "stage " << s << ": " << valid.message() << "\n" << printGraph(stage->graph);
    stages.push_back(std::move(*stage));
  }
  return stages;
}

Graph mlpWithLoss(int64_t batch) {
  MlpSpec spec;
  spec.input = 6;
  spec.hidden = {8, 8, 8};
  spec.classes = 4;
  spec.batch = batch;
  auto model = generateMlp(spec);
  EXPECT_TRUE(model) << model.status().message();
  Graph graph = std::move(*model);
  EXPECT_TRUE(attachLoss(graph, LossKind::kSoftmaxCrossEntropy));
  return graph;
}

StageAssignment balanced(const Graph& graph, int stages) {
  StageCostModel model;
  model.node_costs.assign(graph.nodes.size(), 1.0);
  auto assignment = assignStages(graph, stages, model);
  EXPECT_TRUE(assignment) << assignment.status().message();
  return assignment ? *assignment : StageAssignment{};
}

TEST(ExtractStage, StagesTogetherHoldEveryNodeOnceAndMatchingMessages) {
  Graph graph = mlpWithLoss(4);
  for (int num_stages = 1; num_stages <= 4; ++num_stages) {
    SCOPED_TRACE(std::to_string(num_stages) + " stages");
    StageAssignment assignment = balanced(graph, num_stages);
    std::vector<PipelineStage> stages = extractAll(graph, assignment);
    ASSERT_EQ(stages.size(), static_cast<size_t>(num_stages));
    // 1. Every node of the model is in exactly one stage graph, under its own result names.
    for (const Node& node : graph.nodes) {
      const std::string& name = graph.values[node.results[0]].name;
      int holders = 0;
      for (const PipelineStage& stage : stages) {
        const Node* copy = producerOf(stage.graph, name);
        if (copy && copy->op == node.op) ++holders;
      }
      EXPECT_EQ(holders, 1) << name;
    }
    // 2. Each send has one receive on its peer with the same tag and type; tags are unique.
    std::set<int64_t> tags;
    int messages = 0;
    for (int s = 0; s < num_stages; ++s)
      for (const Node& send : stages[s].graph.nodes) {
        if (send.op != OpId::send) continue;
        ++messages;
        const int64_t peer = intAttr(send, "peer_stage"), tag = intAttr(send, "tag");
        EXPECT_GT(peer, s);
        EXPECT_TRUE(tags.insert(tag).second);
        int receives = 0;
        for (const Node& recv : stages[peer].graph.nodes)
          if (recv.op == OpId::recv && intAttr(recv, "tag") == tag) {
            ++receives;
            EXPECT_EQ(intAttr(recv, "peer_stage"), s);
            EXPECT_EQ(stages[peer].graph.values[recv.results[0]].type, stages[s].graph.values[send.operands[0]].type);
            EXPECT_EQ(stages[peer].graph.values[recv.results[0]].name, stages[s].graph.values[send.operands[0]].name);
          }
        EXPECT_EQ(receives, 1);
      }
    // 3. The boundaries list the same messages; a chain of layers sends one activation per cut.
    auto transfers = stageTransfers(graph, assignment);
    ASSERT_TRUE(transfers);
    EXPECT_EQ(static_cast<int>(transfers->size()), messages);
    EXPECT_EQ(messages, num_stages - 1);
    for (const StageTransfer& transfer : *transfers) EXPECT_TRUE(transfer.carries_gradient) << transfer.value_name;
    for (int s = 0; s < num_stages; ++s) {
      EXPECT_EQ(stages[s].boundary.stage, s);
      EXPECT_EQ(stages[s].boundary.num_stages, num_stages);
      EXPECT_EQ(stages[s].boundary.sends.size(), s + 1 < num_stages ? 1u : 0u);
      EXPECT_EQ(stages[s].boundary.recvs.size(), s > 0 ? 1u : 0u);
    }
    // 4. Inputs and the loss go where they are used: x first, labels and the loss last.
    EXPECT_NE(stages.front().graph.findValue("x"), kNoValue);
    EXPECT_TRUE(stages.back().graph.isInput(stages.back().graph.findValue("labels")));
    ASSERT_EQ(stages.back().graph.outputs.size(), 1u);
    EXPECT_EQ(stages.back().graph.values[stages.back().graph.outputs[0]].name, "loss");
    for (int s = 0; s + 1 < num_stages; ++s) {
      EXPECT_TRUE(stages[s].graph.outputs.empty());
      EXPECT_EQ(stages[s].graph.findValue("labels"), kNoValue);
    }
    size_t params = 0;
    for (const PipelineStage& stage : stages) params += stage.graph.params.size();
    EXPECT_EQ(params, graph.params.size());
  }
}

const char* kConstantOnTwoStages = R"(graph @g {
  input %x : f32[2,3]
  param %w1 : f32[3,3] = zeros
  param %w2 : f32[3,3] = zeros
  %two = constant() {value = dense<f32[]: [2.0]>}
  %scaled = mul(%x, %two)
  %h = matmul(%scaled, %w1)
  %a = relu(%h)
  %g = matmul(%a, %w2)
  %b = mul(%g, %two)
  %loss = reduce_sum(%b) {keepdims = 0}
  output %loss
})";

TEST(ExtractStage, ConstantsAreCopiedIntoEveryStageUsingThem) {
  Graph graph = parse(kConstantOnTwoStages);
  StageAssignment assignment{2, {0, 0, 0, 0, 1, 1, 1}, {}, {}};
  std::vector<PipelineStage> stages = extractAll(graph, assignment);
  ASSERT_EQ(stages.size(), 2u);
  for (const PipelineStage& stage : stages) {
    const Node* two = producerOf(stage.graph, "two");
    ASSERT_NE(two, nullptr);
    EXPECT_EQ(two->op, OpId::constant);
  }
  EXPECT_EQ(printGraph(stages[0].graph), R"(graph @g {
  input %x : f32[2,3]
  param %w1 : f32[3,3] = zeros
  %two = constant() {value = dense<f32[]: [2]>} : f32[]
  %scaled = mul(%x, %two) : f32[2,3]
  %h = matmul(%scaled, %w1) : f32[2,3]
  %a = relu(%h) : f32[2,3]
  send(%a) {peer_stage = 1, tag = 0}
}
)");
  EXPECT_EQ(printGraph(stages[1].graph), R"(graph @g {
  param %w2 : f32[3,3] = zeros
  %two = constant() {value = dense<f32[]: [2]>} : f32[]
  %a = recv() {dtype = "f32", peer_stage = 0, shape = [2, 3], tag = 0} : f32[2,3]
  %g = matmul(%a, %w2) : f32[2,3]
  %b = mul(%g, %two) : f32[2,3]
  %loss = reduce_sum(%b) {keepdims = 0} : f32[]
  output %loss
}
)");
}

TEST(ExtractStage, ValuesGoStraightToEveryLaterStageUsingThem) {
  // %h (stage 0) is used on stages 1 and 2: two transfers, each with its own tag.
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %h = matmul(%x, %w)
    %a = relu(%h)
    %b = add(%a, %h)
    %loss = reduce_sum(%b) {keepdims = 0}
    output %loss
  })");
  StageAssignment assignment{3, {0, 1, 2, 2}, {}, {}};
  auto transfers = stageTransfers(graph, assignment);
  ASSERT_TRUE(transfers) << transfers.status().message();
  ASSERT_EQ(transfers->size(), 3u);
  auto describe = [](const StageTransfer& t) {
    return t.value_name + " " + std::to_string(t.from_stage) + "->" + std::to_string(t.to_stage) + " #" +
           std::to_string(t.tag) + (t.carries_gradient ? " grad" : "");
  };
  EXPECT_EQ(describe((*transfers)[0]), "h 0->1 #0 grad");
  EXPECT_EQ(describe((*transfers)[1]), "h 0->2 #1 grad");
  EXPECT_EQ(describe((*transfers)[2]), "a 1->2 #2 grad");
  extractAll(graph, assignment);
}

TEST(ExtractStage, OnlyValuesOnAPathFromAParameterToTheLossCarryGradients) {
  // Stage 0 has no parameter: %a depends on the input only, so no gradient goes back for it.
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %a = relu(%x)
    %h = matmul(%a, %w)
    %loss = reduce_sum(%h) {keepdims = 0}
    output %loss
  })");
  auto transfers = stageTransfers(graph, StageAssignment{2, {0, 1, 1}, {}, {}});
  ASSERT_TRUE(transfers) << transfers.status().message();
  ASSERT_EQ(transfers->size(), 1u);
  EXPECT_FALSE((*transfers)[0].carries_gradient);
}

TEST(ExtractStage, OutputsComputedEarlierAreSentToTheLastStage) {
  Graph graph = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %h = matmul(%x, %w)
    %a = relu(%h)
    %loss = reduce_sum(%a) {keepdims = 0}
    output %loss, %h
  })");
  std::vector<PipelineStage> stages = extractAll(graph, StageAssignment{2, {0, 1, 1}, {}, {}});
  ASSERT_EQ(stages.size(), 2u);
  const Graph& last = stages[1].graph;
  ASSERT_EQ(last.outputs.size(), 2u);
  EXPECT_EQ(last.nodes[last.values[last.outputs[1]].producer].op, OpId::recv);
  EXPECT_EQ(stages[1].boundary.recvs.size(), 1u);
}

std::string extractionError(const Graph& graph, StageAssignment assignment, int stage = 0) {
  auto result = extractStage(graph, assignment, stage);
  EXPECT_FALSE(result);
  return result ? std::string() : result.status().message();
}

TEST(ExtractStage, Errors) {
  Graph graph = parse(kConstantOnTwoStages);
  // A node using a value a later stage computes.
  EXPECT_EQ(extractionError(graph, {2, {0, 0, 1, 0, 1, 1, 1}, {}, {}}),
            "t.cir:8:3: relu '%a': on stage 0 uses '%h', which stage 1 computes later in the pipeline");
  // The loss before the last stage.
  EXPECT_EQ(extractionError(graph, {3, {0, 0, 0, 0, 1, 1, 1}, {}, {}}),
            "t.cir:11:3: reduce_sum '%loss': output 0 (the loss) is computed on stage 1, not on the last stage (stage 2)");
  // An assignment of another graph.
  EXPECT_EQ(extractionError(graph, {2, {0, 1}, {}, {}}),
            "pipeline stages: the assignment has 2 node stages for 7 nodes and 2 stages");
  // A parameter used on two stages that a state update writes.
  Graph updated = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %h = matmul(%x, %w)
    %g = matmul(%h, %w)
    %loss = reduce_sum(%g) {keepdims = 0}
    %w2 = add(%w, %w)
    output %loss
    update %w = %w2
  })");
  EXPECT_EQ(extractionError(updated, {2, {0, 1, 1, 1}, {}, {}}),
            "pipeline stages: '%w' is used on stage 0 and stage 1 and has a state update, which stages cannot share");
}

// A trainable parameter two stages use (a tied embedding and head) is on both, and each boundary
// names the stages that share it.
TEST(ExtractStage, SharedParameter) {
  Graph tied = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    param %v : f32[3,3] = zeros
    %h = matmul(%x, %w)
    %k = matmul(%h, %v)
    %g = matmul(%k, %w)
    %loss = reduce_sum(%g) {keepdims = 0}
    output %loss
  })");
  for (int stage : {0, 1}) {
    auto extracted = extractStage(tied, {2, {0, 1, 1, 1}, {}, {}}, stage);
    ASSERT_TRUE(extracted) << extracted.status().message();
    EXPECT_NE(extracted->graph.findValue("w"), kNoValue);
    ASSERT_EQ(extracted->boundary.shared.size(), 1u);
    EXPECT_EQ(extracted->boundary.shared[0].name, "w");
    EXPECT_EQ(extracted->boundary.shared[0].stages, (std::vector<int64_t>{0, 1}));
  }
}

}  // namespace
}  // namespace cleave

namespace cleave {
namespace {

// Issue 5's balance target: a 24-layer gpt over 4 stages, costed by the cost model (cpu-local),
// has its slowest stage within 5% of a quarter of the total.
TEST(AssignStages, TwentyFourLayerGptOnFourStagesIsBalancedWithinFivePercent) {
  auto model = generateGpt(GptSpec{.layers = 24, .hidden = 128, .heads = 4, .seq = 64, .vocab = 512, .batch = 8});
  ASSERT_TRUE(model) << model.status().message();
  ASSERT_TRUE(attachLoss(*model, LossKind::kSoftmaxCrossEntropy));
  auto cluster = builtinCluster("cpu-local");
  ASSERT_TRUE(cluster);
  StageCostModel costs = stageCostModel(*model, CostModel(*cluster));
  auto stages = assignStages(*model, 4, costs);
  ASSERT_TRUE(stages) << stages.status().message();
  double total = 0, slowest = 0;
  for (double c : stages->stage_cost) {
    total += c;
    slowest = std::max(slowest, c);
  }
  EXPECT_LE(slowest, 1.05 * total / 4) << "slowest stage " << slowest << " of total " << total;
}

}  // namespace
}  // namespace cleave
