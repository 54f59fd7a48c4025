// Models and tensors shared by the pipeline tests: small training graphs and seeded random feeds.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "frontend/model_generators.h"
#include "ir/graph.h"
#include "passes/training/loss_head.h"
#include "tests/unit/graph_interpreter.h"

namespace cleave::test {

// A small MLP (6 -> 8 -> 8 -> 8 -> 4) with a softmax cross-entropy loss, at batch `batch`.
inline Graph pipelineMlp(int64_t batch) {
  MlpSpec spec;
  spec.input = 6;
  spec.hidden = {8, 8, 8};
  spec.classes = 4;
  spec.batch = batch;
  auto model = generateMlp(spec);
  EXPECT_TRUE(model) << model.status().message();
  Graph graph = model ? std::move(*model) : Graph{};
  auto loss = attachLoss(graph, LossKind::kSoftmaxCrossEntropy);
  EXPECT_TRUE(loss) << loss.status().message();
  return graph;
}

// A two-block GPT (hidden 8, 2 heads, sequence 4, vocabulary 11) with its loss, at batch `batch`.
inline Graph pipelineGpt(int64_t batch) {
  GptSpec spec;
  spec.layers = 2;
  spec.hidden = 8;
  spec.heads = 2;
  spec.seq = 4;
  spec.vocab = 11;
  spec.batch = batch;
  auto model = generateGpt(spec);
  EXPECT_TRUE(model) << model.status().message();
  Graph graph = model ? std::move(*model) : Graph{};
  auto loss = attachLoss(graph, LossKind::kSoftmaxCrossEntropy);
  EXPECT_TRUE(loss) << loss.status().message();
  return graph;
}

// Seeded random tensors for every input and parameter of `graph`: floats normal(0, 0.5), integers
// (labels, token ids) uniform in [0, integer_limit).
inline TensorMap randomFeeds(const Graph& graph, int64_t integer_limit, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<double> normal(0.0, 0.5);
  std::uniform_int_distribution<int64_t> integer(0, integer_limit - 1);
  TensorMap feeds;
  std::vector<ValueId> fed = graph.inputs;
  for (const Param& p : graph.params) fed.push_back(p.value);
  for (ValueId v : fed) {
    const TensorType& type = graph.values[v].type;
    std::vector<double> elements(static_cast<size_t>(type.numel()));
    for (double& e : elements) e = isFloat(type.dtype) ? normal(random) : static_cast<double>(integer(random));
    feeds[graph.values[v].name] = makeTensor(type, elements);
  }
  return feeds;
}

// Expects `actual` to equal `expected` element by element within `tolerance` x the largest |expected|
// (at least `scale_floor`).
inline void expectClose(const TensorData& actual, const TensorData& expected, double tolerance, const std::string& what,
                        double scale_floor = 1e-30) {
  ASSERT_EQ(actual.type, expected.type) << what;
  std::vector<double> a = toDoubles(actual), e = toDoubles(expected);
  double scale = scale_floor;
  for (double x : e) scale = std::max(scale, std::abs(x));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
  EXPECT_LE(worst, tolerance * scale) << what << ": largest difference " << worst << ", largest |value| " << scale;
}

}  // namespace cleave::test
