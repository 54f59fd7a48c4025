// Unit tests of lowering to a plan, memory planning, plan validation and .cplan reading and writing.
#include "passes/lowering/lower_to_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/plan_storage.h"
#include "passes/lowering/memory_planner.h"

namespace cleave {
namespace {

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }

ValueId input(Graph& graph, const std::string& name, TensorType type) {
  auto v = graph.addInput(name, std::move(type));
  EXPECT_TRUE(v.hasValue()) << v.status().message();
  return v ? *v : kNoValue;
}

ValueId param(Graph& graph, const std::string& name, TensorType type, bool trainable = true) {
  Initializer init;
  init.kind = "normal";
  init.args = {{"std", 0.02}, {"seed", int64_t{7}}};
  auto v = graph.addParam(name, std::move(type), std::move(init), trainable);
  EXPECT_TRUE(v.hasValue()) << v.status().message();
  return v ? *v : kNoValue;
}

std::vector<ValueId> nodeResults(Graph& graph, OpId op, std::vector<ValueId> operands, AttrMap attrs,
                                 std::vector<std::string> names) {
  auto results = graph.addNode(op, std::move(operands), std::move(attrs), {}, std::move(names));
  EXPECT_TRUE(results.hasValue()) << results.status().message();
  return results ? *results : std::vector<ValueId>{};
}

ValueId node(Graph& graph, OpId op, std::vector<ValueId> operands, const std::string& name, AttrMap attrs = {}) {
  auto results = nodeResults(graph, op, std::move(operands), std::move(attrs), {name});
  return results.empty() ? kNoValue : results[0];
}

ValueId constantI64(Graph& graph, const std::string& name, int64_t value) {
  auto data = std::make_shared<TensorData>();
  data->type = {DType::kI64, {}};
  data->bytes.resize(sizeof(int64_t));
  std::memcpy(data->bytes.data(), &value, sizeof(int64_t));
  return node(graph, OpId::constant, {}, name, {{"value", std::shared_ptr<const TensorData>(data)}});
}

planpb::Plan lower(std::vector<ProgramGraph> programs) {
  LoweringInput in;
  in.programs = std::move(programs);
  in.model_name = "test";
  in.global_batch = 4;
  auto plan = lowerToPlan(in);
  EXPECT_TRUE(plan.hasValue()) << plan.status().message();
  return plan ? std::move(*plan) : planpb::Plan();
}

// The buffer named `name`; fails the test when there is not exactly one.
const planpb::Buffer& buffer(const planpb::RankPlan& rank, const std::string& name) {
  const planpb::Buffer* found = nullptr;
  int count = 0;
  for (const auto& b : rank.buffers())
    if (b.name() == name) found = &b, ++count;
  EXPECT_EQ(count, 1) << "buffer " << name;
  static const planpb::Buffer kNone;
  return found ? *found : kNone;
}

const planpb::Program& program(const planpb::RankPlan& rank, const std::string& name) {
  for (const auto& p : rank.programs())
    if (p.name() == name) return p;
  ADD_FAILURE() << "no program " << name;
  static const planpb::Program kNone;
  return kNone;
}

std::vector<std::string> instructionNames(const planpb::Program& p) {
  std::vector<std::string> names;
  for (const auto& instruction : p.instructions())
    names.push_back(instruction.kind() == planpb::KERNEL ? instruction.op()
                                                          : planpb::InstructionKind_Name(instruction.kind()));
  return names;
}

bool bytesOverlap(const planpb::Buffer& a, const planpb::Buffer& b) {
  return a.offset() < b.offset() + bufferBytes(b) && b.offset() < a.offset() + bufferBytes(a);
}

// A training step (y = x·w, mse loss, a hand-written gradient, SGD) and an eval graph sharing w.
struct TrainEval {
  Graph train, eval;
  TrainEval() {
    train.name = "train";
    ValueId x = input(train, "x", f32({4, 8}));
    ValueId t = input(train, "t", f32({4, 16}));
    ValueId w = param(train, "w", f32({8, 16}));
    ValueId step = param(train, "step", {DType::kI64, {}}, false);
    ValueId y = node(train, OpId::matmul, {x, w}, "y");
    ValueId loss = node(train, OpId::mse, {y, t}, "loss");
    ValueId dy = node(train, OpId::sub, {y, t}, "dy");
    ValueId grad = node(train, OpId::matmul, {x, dy}, "w.grad", {{"transpose_a", int64_t{1}}});
    ValueId w_new = node(train, OpId::sgd_update, {w, grad, step}, "w_new", {{"lr", 0.1}});
    ValueId one = constantI64(train, "one", 1);
    ValueId step_next = node(train, OpId::add, {step, one}, "step_next");
    train.outputs = {loss};
    train.updates = {{w, w_new}, {step, step_next}};

    eval.name = "eval";
    ValueId ex = input(eval, "x", f32({4, 8}));
    ValueId ew = param(eval, "w", f32({8, 16}));
    eval.outputs = {node(eval, OpId::matmul, {ex, ew}, "logits")};
  }
  planpb::Plan plan() { return lower({{"train", &train}, {"eval", &eval}}); }
};

// ---- naming rules ----

TEST(LowerToPlanRules, OptimizerStateIsRecognisedByName) {
  EXPECT_TRUE(isOptimizerState("step", false));
  EXPECT_TRUE(isOptimizerState("fc1.weight.momentum", false));
  EXPECT_TRUE(isOptimizerState("fc1.weight.exp_avg", false));
  EXPECT_TRUE(isOptimizerState("fc1.weight.exp_avg_sq", false));
  EXPECT_FALSE(isOptimizerState("step", true));
  EXPECT_FALSE(isOptimizerState("fc1.weight.momentum", true));
  EXPECT_FALSE(isOptimizerState("bn.running_mean", false));
  EXPECT_FALSE(isOptimizerState("steps", false));
}

TEST(LowerToPlanRules, ParameterGradientsAreRecognisedByName) {
  Graph g;
  param(g, "w", f32({2}));
  input(g, "x", f32({2}));
  EXPECT_TRUE(isParameterGradient(g, "w.grad"));
  EXPECT_FALSE(isParameterGradient(g, "x.grad"));  // an input, not a parameter
  EXPECT_FALSE(isParameterGradient(g, "v.grad"));
  EXPECT_FALSE(isParameterGradient(g, "w"));
  EXPECT_FALSE(isParameterGradient(g, ".grad"));
}

// ---- lowering ----

TEST(LowerToPlan, ParametersArePersistentAndSharedBetweenPrograms) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  ASSERT_EQ(plan.ranks_size(), 1);
  EXPECT_EQ(plan.format_version(), kPlanFormatVersion);
  EXPECT_EQ(plan.devices(), 1);
  EXPECT_EQ(plan.strategy().dp() * plan.strategy().tp() * plan.strategy().pp(), 1);
  const planpb::RankPlan& rank = plan.ranks(0);

  ASSERT_EQ(rank.parameters_size(), 2);
  EXPECT_EQ(rank.parameters(0).name(), "w");
  EXPECT_EQ(rank.parameters(0).init().kind(), "normal");
  EXPECT_DOUBLE_EQ(rank.parameters(0).init().args().at("std").f(), 0.02);
  EXPECT_TRUE(rank.parameters(0).trainable());
  EXPECT_EQ(rank.parameters(1).name(), "step");
  const planpb::Buffer& w = buffer(rank, "w");
  EXPECT_EQ(w.kind(), planpb::BUFFER_PARAM);
  EXPECT_EQ(buffer(rank, "step").kind(), planpb::BUFFER_OPTIMIZER_STATE);
  EXPECT_EQ(buffer(rank, "w.grad").kind(), planpb::BUFFER_GRADIENT);
  EXPECT_EQ(buffer(rank, "y").kind(), planpb::BUFFER_ACTIVATION);
  EXPECT_EQ(buffer(rank, "loss").kind(), planpb::BUFFER_OUTPUT);
  EXPECT_EQ(buffer(rank, "logits").kind(), planpb::BUFFER_OUTPUT);

  // Persistent region: w (512 bytes) then step (8 bytes, padded to 64), at the arena's start.
  EXPECT_EQ(w.offset(), 0);
  EXPECT_EQ(buffer(rank, "step").offset(), 512);
  EXPECT_EQ(rank.persistent_bytes(), 512 + 64);
  for (const auto& b : rank.buffers()) {
    if (!b.has_alias_of() && b.kind() != planpb::BUFFER_PARAM && b.kind() != planpb::BUFFER_OPTIMIZER_STATE) {
      EXPECT_GE(b.offset(), rank.persistent_bytes()) << b.name();
    }
  }

  // Both programs read the same w buffer.
  const planpb::Program& train = program(rank, "train");
  const planpb::Program& eval = program(rank, "eval");
  EXPECT_EQ(train.instructions(0).operands(1), w.id());
  EXPECT_EQ(eval.instructions(0).operands(1), w.id());
  ASSERT_EQ(eval.outputs_size(), 1);
  EXPECT_EQ(eval.outputs(0).name(), "logits");
  ASSERT_EQ(train.inputs_size(), 2);
  EXPECT_EQ(train.inputs(0).name(), "x");
  EXPECT_EQ(buffer(rank, "t").kind(), planpb::BUFFER_INPUT);

  // The programs reuse one activation region: the arena is the larger program's peak.
  EXPECT_GT(train.peak_bytes(), rank.persistent_bytes());
  EXPECT_GT(eval.peak_bytes(), rank.persistent_bytes());
  EXPECT_EQ(rank.arena_bytes(), std::max(train.peak_bytes(), eval.peak_bytes()));
  EXPECT_TRUE(validatePlan(plan).isOk());

  MemoryReport report = memoryReport(rank);
  EXPECT_EQ(report.param_bytes, 512);
  EXPECT_EQ(report.optimizer_state_bytes, 8);
  EXPECT_EQ(report.gradient_bytes, 512);
  EXPECT_EQ(report.persistent_bytes, 576);
  EXPECT_EQ(report.activation_region_bytes, rank.arena_bytes() - 576);
}

TEST(LowerToPlan, KernelInstructionsCarryOpsAttributesAndSources) {
  Graph g;
  ValueId x = input(g, "x", f32({2, 3}));
  auto results = g.addNode(OpId::softmax, {x}, {{"axis", int64_t{0}}}, SourceLoc{"model.cir", 3, 5, ""}, {"s"});
  ASSERT_TRUE(results.hasValue());
  g.outputs = {(*results)[0]};
  planpb::Plan plan = lower({{"infer", &g}});
  const planpb::Instruction& instruction = plan.ranks(0).programs(0).instructions(0);
  EXPECT_EQ(instruction.kind(), planpb::KERNEL);
  EXPECT_EQ(instruction.op(), "softmax");
  EXPECT_EQ(instruction.attrs().at("axis").i(), 0);
  EXPECT_EQ(instruction.source(), "model.cir:3:5");
  EXPECT_EQ(plan.ranks(0).parameters_size(), 0);
  EXPECT_FALSE(plan.has_training());
}

TEST(LowerToPlan, ChainOfActivationsReusesTwoSlots) {
  // x -> a -> b -> c -> d, each 1 KiB: at most two are live at once.
  Graph g;
  ValueId v = input(g, "x", f32({256}));
  for (const char* name : {"a", "b", "c", "d"}) v = node(g, OpId::neg, {v}, name);
  g.outputs = {v};
  planpb::Plan plan = lower({{"infer", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  EXPECT_EQ(rank.persistent_bytes(), 0);
  EXPECT_EQ(rank.arena_bytes(), 2 * 1024);
  EXPECT_EQ(rank.programs(0).peak_bytes(), 2 * 1024);
  EXPECT_FALSE(bytesOverlap(buffer(rank, "a"), buffer(rank, "b")));
  EXPECT_FALSE(bytesOverlap(buffer(rank, "c"), buffer(rank, "d")));
}

TEST(LowerToPlan, ViewsAliasTheirOperandWithoutInstructions) {
  Graph g;
  ValueId x = input(g, "x", f32({64}));
  ValueId y = node(g, OpId::neg, {x}, "y");
  ValueId r = node(g, OpId::reshape, {y}, "r", {{"shape", std::vector<int64_t>{8, 8}}});
  ValueId u = node(g, OpId::neg, {x}, "u");
  ValueId v = node(g, OpId::neg, {u}, "v");
  ValueId rv = node(g, OpId::reshape, {v}, "rv", {{"shape", std::vector<int64_t>{8, 8}}});
  ValueId sum = node(g, OpId::add, {r, rv}, "sum");
  ValueId flat = node(g, OpId::flatten, {sum}, "flat", {{"axis", int64_t{0}}});
  ValueId xview = node(g, OpId::unsqueeze, {x}, "xview", {{"axes", std::vector<int64_t>{0}}});
  g.outputs = {flat, xview};
  planpb::Plan plan = lower({{"infer", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  const planpb::Program& p = rank.programs(0);
  EXPECT_EQ(instructionNames(p), (std::vector<std::string>{"neg", "neg", "neg", "add"}));

  const planpb::Buffer& rb = buffer(rank, "r");
  ASSERT_TRUE(rb.has_alias_of());
  EXPECT_EQ(rb.alias_of(), buffer(rank, "y").id());
  EXPECT_EQ(rb.offset(), buffer(rank, "y").offset());
  // y is read (through r) by the last instruction, so u and v may not reuse its bytes.
  EXPECT_FALSE(bytesOverlap(buffer(rank, "y"), buffer(rank, "u")));
  EXPECT_FALSE(bytesOverlap(buffer(rank, "y"), buffer(rank, "v")));

  // Outputs that are views name the view buffer, which shares the storage kept live to the end.
  ASSERT_EQ(p.outputs_size(), 2);
  const planpb::Buffer& flat_buffer = rank.buffers(p.outputs(0).buffer());
  EXPECT_EQ(flat_buffer.name(), "flat");
  EXPECT_EQ(flat_buffer.alias_of(), buffer(rank, "sum").id());
  const planpb::Buffer& xview_buffer = rank.buffers(p.outputs(1).buffer());
  EXPECT_EQ(xview_buffer.alias_of(), buffer(rank, "x").id());
  EXPECT_EQ(xview_buffer.offset(), buffer(rank, "x").offset());
  // x is live to the end (through its view), so nothing may reuse its bytes.
  for (const char* name : {"y", "u", "v", "sum"}) EXPECT_FALSE(bytesOverlap(buffer(rank, "x"), buffer(rank, name))) << name;
  // Storage is counted once: y, u, v and sum (whose view is the output); views add nothing.
  EXPECT_EQ(memoryReport(rank).activation_bytes, 4 * 256);
  EXPECT_EQ(memoryReport(rank).input_bytes, 256);
  EXPECT_EQ(memoryReport(rank).output_bytes, 0);
}

TEST(LowerToPlan, UpdateComputedInPlaceAliasesTheParameter) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  const planpb::RankPlan& rank = plan.ranks(0);
  const planpb::Program& train = program(rank, "train");
  // sgd_update is the last reader of w and add the last reader of step: both write in place.
  EXPECT_EQ(buffer(rank, "w_new").alias_of(), buffer(rank, "w").id());
  EXPECT_EQ(buffer(rank, "w_new").offset(), buffer(rank, "w").offset());
  EXPECT_EQ(buffer(rank, "step_next").alias_of(), buffer(rank, "step").id());
  for (const auto& instruction : train.instructions()) EXPECT_EQ(instruction.kind(), planpb::KERNEL);
}

TEST(LowerToPlan, UpdateReadAfterItsProducerIsCopiedAtTheEnd) {
  Graph g;
  ValueId x = input(g, "x", f32({16}));
  ValueId w = param(g, "w", f32({16}));
  ValueId w_new = node(g, OpId::sub, {w, x}, "w_new");
  ValueId late = node(g, OpId::mul, {w, x}, "late");  // reads the old w after w_new exists
  g.outputs = {late};
  g.updates = {{w, w_new}};
  planpb::Plan plan = lower({{"train", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  const planpb::Program& p = rank.programs(0);
  EXPECT_FALSE(buffer(rank, "w_new").has_alias_of());
  EXPECT_EQ(instructionNames(p), (std::vector<std::string>{"sub", "mul", "COPY"}));
  const planpb::Instruction& copy = p.instructions(2);
  EXPECT_EQ(copy.operands(0), buffer(rank, "w_new").id());
  EXPECT_EQ(copy.results(0), buffer(rank, "w").id());
  EXPECT_EQ(copy.source(), "update %w = %w_new");
  // w_new stays live until the copy reads it.
  EXPECT_FALSE(bytesOverlap(buffer(rank, "w_new"), buffer(rank, "late")));
}

TEST(LowerToPlan, UpdateFromANonElementwiseOpIsCopied) {
  Graph g;
  ValueId w = param(g, "w", f32({4, 4}));
  ValueId w_new = node(g, OpId::transpose, {w}, "w_new");
  g.updates = {{w, w_new}};
  planpb::Plan plan = lower({{"train", &g}});
  EXPECT_EQ(instructionNames(plan.ranks(0).programs(0)), (std::vector<std::string>{"transpose", "COPY"}));
}

TEST(LowerToPlan, OutputOfAnUpdatedParameterIsTheValueBeforeTheUpdate) {
  Graph g;
  ValueId x = input(g, "x", f32({16}));
  ValueId w = param(g, "w", f32({16}));
  ValueId w_new = node(g, OpId::add, {w, x}, "w_new");
  g.outputs = {w, w_new};
  g.updates = {{w, w_new}};
  planpb::Plan plan = lower({{"train", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  const planpb::Program& p = rank.programs(0);
  // The output w must not see the new value: no aliasing; a snapshot is taken before the copy.
  EXPECT_EQ(instructionNames(p), (std::vector<std::string>{"add", "COPY", "COPY"}));
  const planpb::Buffer& snapshot = rank.buffers(p.outputs(0).buffer());
  EXPECT_EQ(p.outputs(0).name(), "w");
  EXPECT_EQ(snapshot.kind(), planpb::BUFFER_OUTPUT);
  EXPECT_EQ(p.instructions(1).operands(0), buffer(rank, "w").id());
  EXPECT_EQ(p.instructions(1).results(0), snapshot.id());
  EXPECT_EQ(p.instructions(2).results(0), buffer(rank, "w").id());
  EXPECT_EQ(rank.buffers(p.outputs(1).buffer()).name(), "w_new");
  EXPECT_TRUE(validatePlan(plan).isOk());
}

TEST(LowerToPlan, UpdatesThroughViewsAndSwapsWork) {
  Graph g;
  ValueId a = param(g, "a", f32({4, 4}));
  ValueId b = param(g, "b", f32({4, 4}));
  ValueId c = param(g, "c", f32({4, 4}));
  ValueId flat = node(g, OpId::reshape, {c}, "c_flat", {{"shape", std::vector<int64_t>{16}}});
  ValueId neg = node(g, OpId::neg, {flat}, "c_neg");
  ValueId c_new = node(g, OpId::reshape, {neg}, "c_new", {{"shape", std::vector<int64_t>{4, 4}}});
  g.updates = {{a, b}, {b, a}, {c, c_new}};  // a and b swap; c's new value is a view
  planpb::Plan plan = lower({{"train", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  const planpb::Program& p = rank.programs(0);
  EXPECT_EQ(instructionNames(p), (std::vector<std::string>{"neg", "COPY", "COPY", "COPY", "COPY", "COPY"}));
  // Both swap sources are snapshotted before any parameter is overwritten.
  int first_update_copy = 3;
  for (int i = 1; i < first_update_copy; ++i)
    EXPECT_EQ(rank.buffers(p.instructions(i).results(0)).kind(), planpb::BUFFER_ACTIVATION);
  std::set<int32_t> targets;
  for (int i = first_update_copy; i < p.instructions_size(); ++i) targets.insert(p.instructions(i).results(0));
  EXPECT_EQ(targets, (std::set<int32_t>{buffer(rank, "a").id(), buffer(rank, "b").id(), buffer(rank, "c").id()}));
  EXPECT_TRUE(validatePlan(plan).isOk());
}

TEST(LowerToPlan, OutputsStayLiveToTheEnd) {
  Graph g;
  ValueId x = input(g, "x", f32({256}));
  ValueId a = node(g, OpId::neg, {x}, "a");
  ValueId b = node(g, OpId::neg, {x}, "b");
  ValueId c = node(g, OpId::neg, {b}, "c");
  ValueId d = node(g, OpId::neg, {c}, "d");
  g.outputs = {a, d};
  planpb::Plan plan = lower({{"infer", &g}});
  const planpb::RankPlan& rank = plan.ranks(0);
  for (const char* name : {"b", "c", "d"}) EXPECT_FALSE(bytesOverlap(buffer(rank, "a"), buffer(rank, name))) << name;
}

TEST(LowerToPlan, RejectsBadInputs) {
  Graph g;
  ValueId w = param(g, "w", f32({4}));
  ValueId x = input(g, "x", f32({4}));
  g.outputs = {node(g, OpId::neg, {x}, "y")};
  Graph other;
  param(other, "w", f32({5}));
  other.outputs = {node(other, OpId::neg, {other.findValue("w")}, "z")};
  LoweringInput in;
  in.programs = {{"train", &g}, {"eval", &other}};
  auto mismatch = lowerToPlan(in);
  ASSERT_FALSE(mismatch.hasValue());
  EXPECT_NE(mismatch.status().message().find("parameter '%w' is f32[5] here but f32[4]"), std::string::npos)
      << mismatch.status().message();

  g.updates = {{x, w}};
  in.programs = {{"train", &g}};
  auto not_param = lowerToPlan(in);
  ASSERT_FALSE(not_param.hasValue());
  EXPECT_NE(not_param.status().message().find("program 'train': update of '%x': only parameters can be updated"),
            std::string::npos)
      << not_param.status().message();
}

TEST(LowerToPlan, RandomGraphsNeverShareBytesWhileLive) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 30; ++trial) {
    Graph g;
    std::vector<Shape> shapes = {{16}, {100}, {7, 9}, {256}};
    std::vector<ValueId> values;
    for (size_t s = 0; s < shapes.size(); ++s) values.push_back(input(g, "in" + std::to_string(s), f32(shapes[s])));
    for (int n = 0; n < 40; ++n) {
      ValueId a = values[rng() % values.size()];
      ValueId b = values[rng() % values.size()];
      std::string name = "v" + std::to_string(n);
      if (rng() % 4 == 0) {
        values.push_back(node(g, OpId::reshape, {a}, name, {{"shape", std::vector<int64_t>{-1}}}));
      } else if (g.values[a].type == g.values[b].type) {
        values.push_back(node(g, OpId::add, {a, b}, name));
      } else {
        values.push_back(node(g, OpId::neg, {a}, name));
      }
    }
    g.outputs = {values.back(), values[values.size() / 2]};
    planpb::Plan plan = lower({{"infer", &g}});
    ASSERT_EQ(plan.ranks_size(), 1);
    const planpb::RankPlan& rank = plan.ranks(0);
    const planpb::Program& p = rank.programs(0);
    // Brute force: each storage's [first, last] from the instructions, then every pair.
    const int64_t end = p.instructions_size() + 1;
    std::map<int32_t, std::pair<int64_t, int64_t>> live;
    auto touch = [&](int32_t id, int64_t t) {
      int32_t root = rank.buffers(id).has_alias_of() ? rank.buffers(id).alias_of() : id;
      auto [it, fresh] = live.try_emplace(root, t, t);
      it->second = {std::min(it->second.first, t), std::max(it->second.second, t)};
    };
    for (const auto& in : p.inputs()) touch(in.buffer(), 0);
    for (const auto& out : p.outputs()) touch(out.buffer(), end);
    for (int i = 0; i < p.instructions_size(); ++i) {
      for (int32_t id : p.instructions(i).operands()) touch(id, i + 1);
      for (int32_t id : p.instructions(i).results()) touch(id, i + 1);
    }
    int64_t total = 0;
    for (auto a = live.begin(); a != live.end(); ++a) {
      total += bufferBytes(rank.buffers(a->first));
      for (auto b = std::next(a); b != live.end(); ++b) {
        bool together = a->second.first <= b->second.second && b->second.first <= a->second.second;
        EXPECT_FALSE(together && bytesOverlap(rank.buffers(a->first), rank.buffers(b->first)))
            << "trial " << trial << ": " << rank.buffers(a->first).name() << " and " << rank.buffers(b->first).name();
      }
    }
    EXPECT_LE(rank.arena_bytes(), total + 64 * static_cast<int64_t>(live.size()));
    EXPECT_TRUE(validatePlan(plan).isOk()) << validatePlan(plan).message();
  }
}

// The greedy-by-size walk written plainly: every placed storage in order of offset.
std::vector<int64_t> plainGreedyBySize(const std::vector<StorageRequest>& storages, int64_t base) {
  std::vector<size_t> order(storages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (storages[a].size != storages[b].size) return storages[a].size > storages[b].size;
    return storages[a].first < storages[b].first;
  });
  std::vector<int64_t> offsets(storages.size(), base);
  std::vector<size_t> placed;  // by offset, ties in placing order
  for (size_t i : order) {
    const StorageRequest& s = storages[i];
    if (s.size <= 0) continue;
    int64_t offset = base;
    for (size_t j : placed) {
      const StorageRequest& other = storages[j];
      if (other.last < s.first || s.last < other.first) continue;
      if (offset + s.size <= offsets[j]) break;
      offset = std::max(offset, offsets[j] + other.size);
    }
    offsets[i] = offset;
    auto at = std::upper_bound(placed.begin(), placed.end(), offset,
                               [&](int64_t o, size_t j) { return o < offsets[j]; });
    placed.insert(at, i);
  }
  return offsets;
}

TEST(MemoryPlanner, RunSummariesPlaceEveryStorageWhereThePlainWalkDoes) {
  // Shaped like training programs: activations kept from the forward pass to the backward pass
  // (nested lifetimes), short-lived temporaries between them, a few sizes, some empty storages.
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t steps = 400 + trial * 100;
    std::vector<StorageRequest> storages;
    const int64_t sizes[] = {0, 64, 128, 512, 2048, 4096};
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t size = sizes[rng() % 6];
      storages.push_back({size, t, t + 1 + static_cast<int64_t>(rng() % 3)});  // a temporary
      if (t < steps / 2 && rng() % 2) storages.push_back({sizes[1 + rng() % 5], t, steps - t});  // kept for backward
      if (rng() % 50 == 0) storages.push_back({sizes[rng() % 6], static_cast<int64_t>(rng() % steps), steps});
    }
    const std::vector<int64_t> fast = placeGreedyBySize(storages, 640);
    ASSERT_EQ(fast, plainGreedyBySize(storages, 640)) << "trial " << trial;
    for (size_t a = 0; a < storages.size(); a += 7)  // spot-check: no two live storages share bytes
      for (size_t b = 0; b < storages.size(); ++b) {
        if (a == b || storages[a].size == 0 || storages[b].size == 0) continue;
        const bool together = storages[a].first <= storages[b].last && storages[b].first <= storages[a].last;
        const bool overlap = fast[a] < fast[b] + storages[b].size && fast[b] < fast[a] + storages[a].size;
        ASSERT_FALSE(together && overlap) << "trial " << trial << ": storages " << a << " and " << b;
      }
  }
}

// ---- validation ----

// Expects validatePlan to reject `plan` with a message containing `fragment`.
void expectInvalid(const planpb::Plan& plan, const std::string& fragment) {
  Status status = validatePlan(plan);
  ASSERT_FALSE(status.isOk()) << "expected an error containing: " << fragment;
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

planpb::Instruction* firstKernel(planpb::Plan& plan, const std::string& program_name) {
  for (auto& p : *plan.mutable_ranks(0)->mutable_programs())
    if (p.name() == program_name) return p.mutable_instructions(0);
  return nullptr;
}

TEST(ValidatePlan, AcceptsLoweredPlans) {
  TrainEval models;
  Status status = validatePlan(models.plan());
  EXPECT_TRUE(status.isOk()) << status.message();
}

TEST(ValidatePlan, RejectsBufferIdOutOfRange) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  firstKernel(plan, "train")->set_operands(0, 999);
  expectInvalid(plan, "operand 0 is buffer id 999, out of range");
}

TEST(ValidatePlan, RejectsBufferOutsideTheArena) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  rank->mutable_buffers(buffer(*rank, "y").id())->set_offset(rank->arena_bytes() - 4);
  expectInvalid(plan, "lie outside the arena");
}

TEST(ValidatePlan, RejectsOverlappingLiveBuffers) {
  Graph g;
  ValueId v = input(g, "x", f32({256}));
  for (const char* name : {"a", "b", "c"}) v = node(g, OpId::neg, {v}, name);
  g.outputs = {v};
  planpb::Plan plan = lower({{"infer", &g}});
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  // b is read by the instruction that writes c: they may not share bytes.
  rank->mutable_buffers(buffer(*rank, "c").id())->set_offset(buffer(*rank, "b").offset());
  expectInvalid(plan, "share bytes while both are live");
}

TEST(ValidatePlan, RejectsParametersOverlappingActivations) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  rank->mutable_buffers(buffer(*rank, "logits").id())->set_offset(0);  // over w
  expectInvalid(plan, "share bytes while both are live");
}

TEST(ValidatePlan, RejectsUnknownOps) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  firstKernel(plan, "eval")->set_op("frobnicate");
  expectInvalid(plan, "unknown op 'frobnicate'");
}

TEST(ValidatePlan, RejectsTypesTheShapeRuleDoesNotGive) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  planpb::TensorType* logits = rank->mutable_buffers(buffer(*rank, "logits").id())->mutable_type();
  logits->set_shape(0, 16);
  logits->set_shape(1, 4);
  expectInvalid(plan, "of type f32[16,4], but matmul gives f32[4,16]");

  planpb::Plan missing_operand = models.plan();
  firstKernel(missing_operand, "eval")->mutable_operands()->RemoveLast();
  expectInvalid(missing_operand, "matmul takes 2 operand(s), got 1");
}

TEST(ValidatePlan, RejectsWrongFormatVersion) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  plan.set_format_version(2);
  expectInvalid(plan, "plan was written by format version 2; this cleave reads version 1");
}

TEST(ValidatePlan, RejectsOutputsNamingUnknownBuffers) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  plan.mutable_ranks(0)->mutable_programs(1)->mutable_outputs(0)->set_buffer(-3);
  expectInvalid(plan, "output 'logits' names unknown buffer -3");
}

TEST(ValidatePlan, RejectsParametersInNonPersistentBuffers) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  rank->mutable_parameters(0)->set_buffer(buffer(*rank, "y").id());
  expectInvalid(plan, "has kind BUFFER_ACTIVATION, not BUFFER_PARAM or BUFFER_OPTIMIZER_STATE");
}

TEST(ValidatePlan, RejectsBadAliasesAndReadsBeforeWrites) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  planpb::RankPlan* rank = plan.mutable_ranks(0);
  rank->mutable_buffers(buffer(*rank, "w_new").id())->set_alias_of(buffer(*rank, "step_next").id());
  expectInvalid(plan, "which is itself an alias");

  planpb::Plan unwritten = models.plan();
  planpb::Program* train = unwritten.mutable_ranks(0)->mutable_programs(0);
  train->mutable_instructions()->DeleteSubrange(0, 1);  // drop y's matmul; mse still reads y
  expectInvalid(unwritten, "reads buffer 'y'");
}

TEST(ValidatePlan, RejectsRankCountsThatDoNotMatchTheDevices) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  plan.set_devices(2);
  expectInvalid(plan, "differs from the plan's 2 devices");
}

// ---- conversions ----

TEST(PlanProto, AttributesRoundTrip) {
  auto tensor = std::make_shared<TensorData>();
  tensor->type = f32({2});
  tensor->bytes = {0, 0, 128, 63, 0, 0, 0, 64};
  std::vector<Attribute> attrs = {Attribute{int64_t{-3}},
                                  Attribute{2.5},
                                  Attribute{std::string("tanh")},
                                  Attribute{std::vector<int64_t>{}},
                                  Attribute{std::vector<int64_t>{1, -1}},
                                  Attribute{std::vector<double>{0.5}},
                                  Attribute{std::shared_ptr<const TensorData>(tensor)}};
  for (const Attribute& attr : attrs) {
    planpb::Attribute proto;
    toProto(attr, &proto);
    auto back = fromProto(proto);
    ASSERT_TRUE(back.hasValue()) << back.status().message();
    EXPECT_TRUE(attrEquals(attr, *back)) << attrKindName(attrKind(attr));
  }
  EXPECT_FALSE(fromProto(planpb::Attribute()).hasValue());
  planpb::TensorType bad;
  bad.set_dtype("f33");
  EXPECT_FALSE(fromProto(bad).hasValue());
}

// ---- files ----

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Memory-backed /dev/shm when there is one: the truncation and corruption tests write many files.
    std::error_code error;
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm", error) && ::access("/dev/shm", W_OK) == 0
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    dir_ = base / ("cleave_plan_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string readBytes(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void writeBytes(const std::string& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary) << bytes;
  }
  std::filesystem::path dir_;
};

TEST_F(PlanFileTest, RoundTripIsBitIdentical) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  ASSERT_TRUE(writePlanFile(plan, path("a.cplan")).isOk());
  auto read = readPlanFile(path("a.cplan"));
  ASSERT_TRUE(read.hasValue()) << read.status().message();
  ASSERT_TRUE(writePlanFile(**read, path("b.cplan")).isOk());
  std::string a = readBytes(path("a.cplan")), b = readBytes(path("b.cplan"));
  EXPECT_EQ(a.substr(0, 8), "CLVPLAN\n");
  EXPECT_EQ(a, b);
  EXPECT_EQ((*read)->ranks(0).buffers_size(), plan.ranks(0).buffers_size());
  // No temporary files are left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 2);
}

TEST_F(PlanFileTest, DataInitializersSurvive) {
  Graph g;
  Initializer init;
  init.kind = "data";
  auto data = std::make_shared<TensorData>();
  data->type = f32({2});
  data->bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  init.data = data;
  ValueId w = *g.addParam("w", f32({2}), init);
  g.outputs = {node(g, OpId::neg, {w}, "y")};
  ASSERT_TRUE(writePlanFile(lower({{"infer", &g}}), path("d.cplan")).isOk());
  auto read = readPlanFile(path("d.cplan"));
  ASSERT_TRUE(read.hasValue()) << read.status().message();
  EXPECT_EQ((*read)->ranks(0).parameters(0).init().data(), std::string("\1\2\3\4\5\6\7\10", 8));
}

TEST_F(PlanFileTest, WrongMagicIsNotACleavePlan) {
  writeBytes(path("x.cplan"), "ONNXPLAN and more");
  auto read = readPlanFile(path("x.cplan"));
  ASSERT_FALSE(read.hasValue());
  EXPECT_EQ(read.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(read.status().message().find(path("x.cplan") + ": not a cleave plan"), std::string::npos)
      << read.status().message();
  writeBytes(path("empty.cplan"), "");
  EXPECT_FALSE(readPlanFile(path("empty.cplan")).hasValue());
  auto missing = readPlanFile(path("missing.cplan"));
  ASSERT_FALSE(missing.hasValue());
  EXPECT_NE(missing.status().message().find("missing.cplan"), std::string::npos);
}

TEST_F(PlanFileTest, EveryTruncationIsAnError) {
  TrainEval models;
  ASSERT_TRUE(writePlanFile(models.plan(), path("full.cplan")).isOk());
  std::string full = readBytes(path("full.cplan"));
  for (size_t size = 0; size < full.size(); ++size) {
    writeBytes(path("cut.cplan"), full.substr(0, size));
    auto read = readPlanFile(path("cut.cplan"));
    EXPECT_FALSE(read.hasValue()) << "truncated to " << size << " of " << full.size() << " bytes";
    if (!read) {
      EXPECT_EQ(read.status().kind(), ErrorKind::kBadInput);
    }
  }
}

TEST_F(PlanFileTest, CorruptBytesNeverCrash) {
  TrainEval models;
  ASSERT_TRUE(writePlanFile(models.plan(), path("full.cplan")).isOk());
  std::string full = readBytes(path("full.cplan"));
  std::mt19937 rng(7);
  for (size_t at = 8; at < full.size(); ++at) {
    std::string corrupt = full;
    corrupt[at] = static_cast<char>(corrupt[at] ^ static_cast<char>(1 + rng() % 255));
    writeBytes(path("bad.cplan"), corrupt);
    auto read = readPlanFile(path("bad.cplan"));  // an error or a plan that validates; never a crash
    if (read) {
      EXPECT_TRUE(validatePlan(**read).isOk());
    }
  }
}

TEST_F(PlanFileTest, NewerFormatVersionIsRejectedByName) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  plan.set_format_version(2);
  ASSERT_TRUE(writePlanFile(plan, path("v2.cplan")).isOk());
  auto read = readPlanFile(path("v2.cplan"));
  ASSERT_FALSE(read.hasValue());
  EXPECT_EQ(read.status().message(),
            path("v2.cplan") + " was written by format version 2; this cleave reads version 1");
}

TEST_F(PlanFileTest, ValidationErrorsNameTheFile) {
  TrainEval models;
  planpb::Plan plan = models.plan();
  firstKernel(plan, "eval")->set_op("frobnicate");
  ASSERT_TRUE(writePlanFile(plan, path("bad_op.cplan")).isOk());
  auto read = readPlanFile(path("bad_op.cplan"));
  ASSERT_FALSE(read.hasValue());
  EXPECT_EQ(read.status().message().rfind(path("bad_op.cplan") + ": ", 0), 0u) << read.status().message();
}

TEST_F(PlanFileTest, UnwritableDestinationIsAnErrorAndLeavesNothing) {
  TrainEval models;
  Status status = writePlanFile(models.plan(), path("no/such/dir/p.cplan"));
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("p.cplan"), std::string::npos);
  // An existing plan is replaced whole.
  ASSERT_TRUE(writePlanFile(models.plan(), path("p.cplan")).isOk());
  ASSERT_TRUE(writePlanFile(models.plan(), path("p.cplan")).isOk());
  EXPECT_TRUE(readPlanFile(path("p.cplan")).hasValue());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

}  // namespace
}  // namespace cleave
