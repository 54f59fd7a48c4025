// Unit tests of inspect's figures on hand-built plans: memory at the peak, bytes per comm kind, Graphviz, Chrome trace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "analysis/plan_dot.h"
#include "analysis/plan_report.h"
#include "analysis/plan_timeline.h"
#include "tests/unit/plan_test_builder.h"

namespace cleave {
namespace {

using plan_testing::PlanBuilder;

double kindBytes(const RankReport& report, CommKind kind) { return report.comm_bytes_by_kind[static_cast<int>(kind)]; }

// Four ranks (dp = 4), each: two kernels, then every kind of communication on stream 1:
// all-reduce of a [1000] gradient, all-gather [250] -> [1000], reduce-scatter [1000] -> [250],
// all-to-all [400] -> [400], a send of [10] to the next rank and a recv of [10] from the previous one.
PlanBuilder everyKindOfCommunication() {
  PlanBuilder b(4);
  b.plan.mutable_strategy()->set_dp(4);
  b.plan.mutable_strategy()->set_tp(1);
  b.plan.mutable_strategy()->set_pp(1);
  for (int r = 0; r < 4; ++r) {
    b.rank(r).set_dp_index(r);
    int x = b.buffer(r, "x", {1000}, planpb::BUFFER_INPUT);
    int h = b.buffer(r, "h", {1000});
    int grad = b.buffer(r, "w.grad", {1000}, planpb::BUFFER_GRADIENT);
    int summed = b.buffer(r, "w.grad.sum", {1000}, planpb::BUFFER_GRADIENT);
    int block = b.buffer(r, "block", {250});
    int gathered = b.buffer(r, "gathered", {1000});
    int scattered = b.buffer(r, "scattered", {250});
    int mixed = b.buffer(r, "mixed", {400});
    int swapped = b.buffer(r, "swapped", {400});
    int sent = b.buffer(r, "sent", {10});
    int received = b.buffer(r, "received", {10});
    b.kernel(r, "relu", {x}, {h});
    b.kernel(r, "relu", {h}, {grad});
    b.collective(r, planpb::ALL_REDUCE, {grad}, {summed}, {0, 1, 2, 3});
    b.collective(r, planpb::ALL_GATHER, {block}, {gathered}, {0, 1, 2, 3});
    b.collective(r, planpb::REDUCE_SCATTER, {summed}, {scattered}, {0, 1, 2, 3});
    b.collective(r, planpb::ALL_TO_ALL, {mixed}, {swapped}, {0, 1, 2, 3});
    b.send(r, sent, (r + 1) % 4, 0);
    b.recv(r, received, (r + 3) % 4, 0);
  }
  return b;
}

TEST(PlanReport, BytesPerCommKindFollowTheAlgorithms) {
  PlanBuilder b = everyKindOfCommunication();
  for (int r = 0; r < 4; ++r) {
    RankReport report = reportRank(b.rank(r), "train");
    EXPECT_EQ(report.rank, r);
    EXPECT_EQ(report.dp_index, r);
    EXPECT_EQ(report.instructions, 8);
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kAllReduce), 2.0 * 3 / 4 * 4000);  // 6000
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kAllGather), 3.0 / 4 * 4000);      // result counts
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kReduceScatter), 3.0 / 4 * 4000);  // operand counts
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kAllToAll), 3.0 / 4 * 1600);
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kSend), 40);
    EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kRecv), 40);
    EXPECT_DOUBLE_EQ(report.commBytes(), 6000 + 3000 + 3000 + 1200 + 40 + 40);
  }
  // Another program name counts nothing.
  EXPECT_DOUBLE_EQ(reportRank(b.rank(0), "eval").commBytes(), 0);
}

TEST(PlanReport, MemoryIsSplitAtTheProgramsPeak) {
  // Lifetimes (time 0 = inputs, instruction i at i + 1, 4 = outputs read):
  //   x [10] input 0..1, a [10] 1..2, g [100] gradient 2..3, out [5] output 3..4.
  // Live bytes: 40, 80, 440, 420, 20: the peak is at time 2 with g (400) and a (40).
  PlanBuilder b(1);
  b.buffer(0, "p", {100}, planpb::BUFFER_PARAM);
  b.buffer(0, "p.momentum", {100}, planpb::BUFFER_OPTIMIZER_STATE);
  int x = b.buffer(0, "x", {10}, planpb::BUFFER_INPUT);
  int a = b.buffer(0, "a", {10});
  int g = b.buffer(0, "g", {100}, planpb::BUFFER_GRADIENT);
  int out = b.buffer(0, "out", {5}, planpb::BUFFER_OUTPUT);
  auto* input = b.program(0).add_inputs();
  input->set_name("x");
  input->set_buffer(x);
  auto* output = b.program(0).add_outputs();
  output->set_name("out");
  output->set_buffer(out);
  b.kernel(0, "relu", {x}, {a});
  b.kernel(0, "relu", {a}, {g});
  b.kernel(0, "relu", {g}, {out});
  b.program(0).set_peak_bytes(2048);
  planpb::Program* eval = b.rank(0).add_programs();
  eval->set_name("eval");
  eval->set_peak_bytes(4096);

  RankReport report = reportRank(b.rank(0), "train");
  EXPECT_EQ(report.param_bytes, 400);
  EXPECT_EQ(report.optimizer_state_bytes, 400);
  EXPECT_EQ(report.grad_bytes, 400);
  EXPECT_EQ(report.activation_bytes, 40);
  EXPECT_EQ(report.peak_memory_bytes, 4096);  // the largest program's planned arena
  EXPECT_EQ(report.instructions, 3);
}

TEST(PlanReport, AGradientAllReducedInPlaceCountsAsGradient) {
  // The local partial sum is an activation; the all-reduce writes the gradient over it in place.
  PlanBuilder b(2);
  for (int r = 0; r < 2; ++r) {
    int x = b.buffer(r, "x", {10}, planpb::BUFFER_INPUT);
    int partial = b.buffer(r, "w.partial", {100});
    int grad = b.buffer(r, "w.grad", {100}, planpb::BUFFER_GRADIENT);
    b.rank(r).mutable_buffers(grad)->set_alias_of(partial);
    b.kernel(r, "relu", {x}, {partial});
    b.collective(r, planpb::ALL_REDUCE, {partial}, {grad}, {0, 1});
  }
  RankReport report = reportRank(b.rank(1), "train");
  EXPECT_EQ(report.grad_bytes, 400);
  EXPECT_EQ(report.activation_bytes, 40);                          // x, live with it at time 1
  EXPECT_DOUBLE_EQ(kindBytes(report, CommKind::kAllReduce), 400);  // n = 2: 2(n-1)/n = 1
}

int countMatches(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST(PlanDot, TheSummaryDrawsOneRankPerStageAndItsPhases) {
  PlanBuilder b = everyKindOfCommunication();
  b.rank(3).set_stage(1);
  std::string dot = planDot(b.plan, "train");
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0u);
  EXPECT_EQ(countMatches(dot, "subgraph cluster_stage\\d+ \\{"), 2);
  EXPECT_NE(dot.find("label=\"stage 0: ranks {0,1,2}, drawn: rank 0 (8 instructions)\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"stage 1: ranks {3}, drawn: rank 3 (8 instructions)\""), std::string::npos) << dot;
  // Without microbatches or gradient kernels the program is one forward phase per stage, counting
  // what it runs; rank 3's send to rank 0 is drawn between the stages.
  EXPECT_EQ(countMatches(dot, "\n    s\\d+_\\d+ \\[label="), 2) << dot;
  EXPECT_NE(dot.find("s3_0 [label=\"forward\\n2 kernels, 1 all_gather (4.0 KB), 1 all_reduce (4.0 KB), 1 all_to_all "
                     "(1.6 KB), 1 recv from rank 2 (40 B), 1 reduce_scatter (4.0 KB), 1 send to rank 0 (40 B)\""),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("s3_0 -> s0_0 [style=dashed"), std::string::npos) << dot;
  EXPECT_EQ(countMatches(dot, "\\{"), countMatches(dot, "\\}"));
  DotOptions rank2;
  rank2.only_rank = 2;
  EXPECT_NE(planDot(b.plan, "train", rank2).find("drawn: rank 2"), std::string::npos);
}

TEST(PlanDot, OneClusterPerRankWithCommunicationEdges) {
  PlanBuilder b = everyKindOfCommunication();
  b.rank(3).set_stage(1);
  DotOptions full;
  full.detail = DotOptions::Detail::kFull;
  std::string dot = planDot(b.plan, "train", full);
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0u);
  EXPECT_EQ(countMatches(dot, "subgraph cluster_rank\\d+ \\{"), 4);
  EXPECT_NE(dot.find("label=\"rank 3 | stage 1 | dp 3 | tp 0\""), std::string::npos);
  EXPECT_EQ(countMatches(dot, "\n    r\\d+_\\d+ \\[label="), 32);         // one node per instruction
  EXPECT_EQ(countMatches(dot, "r\\d+_6 -> r\\d+_7 \\[style=dashed"), 4);  // each send to its recv
  EXPECT_EQ(countMatches(dot, "style=dotted"), 4 * 3);                    // 4 collectives, 4 members each
  EXPECT_NE(dot.find("r0_0 -> r0_1;"), std::string::npos);                // a data dependency
  EXPECT_EQ(countMatches(dot, "\\{"), countMatches(dot, "\\}"));
  // Stages have their own colours.
  EXPECT_NE(dot.find("r0_0 [label=\"relu h\", fillcolor=\"#aec7e8\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("r3_0 [label=\"relu h\", fillcolor=\"#ffbb78\"]"), std::string::npos) << dot;
}

TEST(PlanDot, BigPlansAreCollapsedAndCappedWithANote) {
  PlanBuilder b = everyKindOfCommunication();
  DotOptions options;
  options.detail = DotOptions::Detail::kFull;
  options.max_nodes = 30;  // 32 instructions: each rank's two kernels become one node, 7 nodes a rank
  std::string dot = planDot(b.plan, "train", options);
  EXPECT_EQ(countMatches(dot, "\n    r\\d+_\\d+ \\[label="), 28);
  EXPECT_NE(dot.find("each run of consecutive compute instructions is one node"), std::string::npos);
  EXPECT_NE(dot.find("r1_0 [label=\"2 instructions (0..1)\\nrelu x2\""), std::string::npos) << dot;

  options.max_nodes = 10;  // one rank only
  dot = planDot(b.plan, "train", options);
  EXPECT_EQ(countMatches(dot, "subgraph cluster_rank\\d+ \\{"), 1);
  EXPECT_NE(dot.find("3 rank(s) left out to stay under the limit (ranks 1..3)"), std::string::npos) << dot;

  options = DotOptions{};
  options.detail = DotOptions::Detail::kFull;
  options.only_rank = 2;
  dot = planDot(b.plan, "train", options);
  EXPECT_EQ(countMatches(dot, "subgraph cluster_rank2 \\{"), 1);
  EXPECT_EQ(countMatches(dot, "subgraph cluster_rank\\d+ \\{"), 1);
}

TEST(PlanTimeline, ChromeTraceIsValidJsonWithOneEventPerInstruction) {
  PlanBuilder b = everyKindOfCommunication();
  auto cluster = builtinCluster("cpu-local");
  ASSERT_TRUE(cluster.hasValue());
  auto timeline = simulateProgram(b.plan, "train", CostModel(*cluster));
  ASSERT_TRUE(timeline.hasValue()) << timeline.status().message();
  EXPECT_GT(timeline->step_time_s, 0);

  auto trace = nlohmann::json::parse(chromeTraceJson(*timeline), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded());
  ASSERT_TRUE(trace["traceEvents"].is_array());
  int complete = 0;
  std::set<std::string> names;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    ++complete;
    EXPECT_GE(event["pid"].get<int>(), 0);
    EXPECT_LE(event["pid"].get<int>(), 3);
    EXPECT_EQ(event["tid"].get<int>(), event["cat"] == "compute" ? 0 : 1);
    EXPECT_GE(event["dur"].get<double>(), 0);
    names.insert(event["name"].get<std::string>());
  }
  EXPECT_EQ(complete, 4 * 8);
  EXPECT_TRUE(names.count("all_reduce 4.0 KB")) << trace.dump();
  EXPECT_TRUE(names.count("send 40 B to rank 1"));
  EXPECT_DOUBLE_EQ(trace["otherData"]["step_time_s"].get<double>(), timeline->step_time_s);

  // One rank only.
  auto one = nlohmann::json::parse(chromeTraceJson(*timeline, 2));
  for (const auto& event : one["traceEvents"]) EXPECT_EQ(event["pid"].get<int>(), 2);
}

}  // namespace
}  // namespace cleave
