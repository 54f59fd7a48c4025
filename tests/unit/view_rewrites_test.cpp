// The rewrites that regroup dims for tensor parallelism compute what the graph computed: random
// chains of views (view-chains, passes/partition/view_chains.h) and attention over batch·heads
// (unmerge-heads, passes/partition/unmerge_heads.h), run before and after by the CPU kernels.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "ir/op_table.h"
#include "ir/verifier.h"
#include "passes/partition/unmerge_heads.h"
#include "passes/partition/view_chains.h"
#include "runtime/device/kernel.h"

namespace cleave {
namespace {

TensorData counting(const TensorType& type) {
  TensorData data{type, std::vector<uint8_t>(type.bytes())};
  float* values = data.as<float>();
  for (int64_t i = 0; i < type.numel(); ++i) values[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return data;
}

// The outputs of `graph` on `inputs`, each node by its CPU kernel (one thread).
std::vector<TensorData> evaluate(const Graph& graph, const std::vector<TensorData>& inputs) {
  std::vector<TensorData> values(graph.values.size());
  for (size_t i = 0; i < graph.inputs.size(); ++i) values[graph.inputs[i]] = inputs[i];
  for (const Node& node : graph.nodes) {
    if (node.op == OpId::constant) {
      values[node.results[0]] = *std::get<std::shared_ptr<const TensorData>>(node.attrs.at("value"));
      continue;
    }
    runtime::CpuKernel kernel = runtime::findCpuKernel(node.op);
    EXPECT_NE(kernel, nullptr) << opName(node.op);
    if (!kernel) return {};
    std::vector<TensorType> operand_types, result_types;
    std::vector<const void*> operands;
    std::vector<void*> results;
    for (ValueId v : node.operands) {
      operand_types.push_back(graph.values[v].type);
      operands.push_back(values[v].bytes.data());
    }
    for (ValueId r : node.results) {
      result_types.push_back(graph.values[r].type);
      values[r] = TensorData{graph.values[r].type, std::vector<uint8_t>(graph.values[r].type.bytes())};
      results.push_back(values[r].bytes.data());
    }
    Status ran = kernel({OpContext{opDef(node.op), operand_types, result_types, node.attrs}, operands, results, 1});
    EXPECT_TRUE(ran) << nodeContext(graph, node) << ran.message();
  }
  std::vector<TensorData> outputs;
  for (ValueId v : graph.outputs) outputs.push_back(values[v]);
  return outputs;
}

// A random shape of `numel` elements, with 1 to 5 dims (unit dims among them).
Shape randomShape(int64_t numel, std::mt19937& random) {
  Shape shape;
  const int rank = 1 + static_cast<int>(random() % 5);
  int64_t rest = numel;
  for (int d = 0; d + 1 < rank; ++d) {
    std::vector<int64_t> divisors;
    for (int64_t k = 1; k <= rest; ++k)
      if (rest % k == 0) divisors.push_back(k);
    const int64_t size = divisors[random() % divisors.size()];
    shape.push_back(size);
    rest /= size;
  }
  shape.push_back(rest);
  return shape;
}

TEST(ViewChains, RandomChainsComputeTheSameAndShrink) {
  std::mt19937 random(11);
  int rewritten = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Graph graph;
    ValueId value = *graph.addInput("x", TensorType{DType::kF32, randomShape(48, random)});
    const int length = 2 + static_cast<int>(random() % 5);
    for (int step = 0; step < length; ++step) {
      const Shape& shape = graph.values[value].type.shape;
      if (random() % 2) {
        std::vector<int64_t> perm(shape.size());
        std::iota(perm.begin(), perm.end(), int64_t{0});
        std::shuffle(perm.begin(), perm.end(), random);
        value = (*graph.addNode(OpId::transpose, {value}, {{"perm", perm}}))[0];
      } else {
        value = (*graph.addNode(OpId::reshape, {value}, {{"shape", randomShape(48, random)}}))[0];
      }
    }
    graph.outputs = {value};
    const size_t before = graph.nodes.size();
    const std::vector<TensorData> inputs = {counting(graph.values[graph.inputs[0]].type)};
    const std::vector<TensorData> expected = evaluate(graph, inputs);
    auto count = canonicalizeViewChains(graph);
    ASSERT_TRUE(count.hasValue()) << count.status().message();
    ASSERT_TRUE(verifyGraph(graph).isOk()) << verifyGraph(graph).message();
    // Rewritten: at most a reshape, a transpose and a reshape; else (a reshape regrouping across
    // dims of sizes that do not divide each other, [2, 3] -> [3, 2]) as it was.
    if (*count) {
      EXPECT_LE(graph.nodes.size(), std::min<size_t>(before - 1, 3)) << "trial " << trial;
    } else {
      EXPECT_EQ(graph.nodes.size(), before) << "trial " << trial;
    }
    EXPECT_EQ(evaluate(graph, inputs), expected) << "trial " << trial;
    rewritten += *count;
  }
  EXPECT_GT(rewritten, 100);
}

// BLOOM's attention with ALiBi, and readers unmerge-heads leaves merged, before and after.
TEST(UnmergeHeads, AttentionComputesTheSame) {
  Graph graph;
  const ValueId q4 = *graph.addInput("q4", TensorType{DType::kF32, {2, 3, 4, 5}});
  const ValueId k4 = *graph.addInput("k4", TensorType{DType::kF32, {2, 3, 4, 5}});
  auto add = [&](OpId op, std::vector<ValueId> operands, AttrMap attrs = {}) {
    return (*graph.addNode(op, std::move(operands), std::move(attrs)))[0];
  };
  auto bias = std::make_shared<TensorData>(counting(TensorType{DType::kF32, {6, 1, 4}}));
  const ValueId alibi = add(OpId::constant, {}, {{"value", std::shared_ptr<const TensorData>(bias)}});
  const ValueId q = add(OpId::reshape, {q4}, {{"shape", Shape{6, 4, 5}}});
  const ValueId k = add(OpId::reshape, {k4}, {{"shape", Shape{6, 4, 5}}});
  const ValueId kt = add(OpId::transpose, {k}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
  const ValueId scores = add(OpId::matmul, {q, kt});
  const ValueId biased = add(OpId::add, {scores, alibi});
  const ValueId probs = add(OpId::softmax, {biased}, {{"axis", int64_t{2}}});
  const ValueId rows = add(OpId::reduce_sum, {probs}, {{"axes", std::vector<int64_t>{0}}});  // mixes the rows
  const ValueId back = add(OpId::reshape, {probs}, {{"shape", Shape{2, 3, 4, 4}}});
  graph.outputs = {back, rows};
  const std::vector<TensorData> inputs = {counting(graph.values[q4].type), counting(graph.values[k4].type)};
  const std::vector<TensorData> expected = evaluate(graph, inputs);
  auto count = unmergeHeads(graph);
  ASSERT_TRUE(count.hasValue()) << count.status().message();
  ASSERT_TRUE(verifyGraph(graph).isOk()) << verifyGraph(graph).message();
  EXPECT_GE(*count, 4);
  EXPECT_EQ(evaluate(graph, inputs), expected);
}

}  // namespace
}  // namespace cleave
