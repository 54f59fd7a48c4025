// Graph summary: what a model is made of and what it costs (ops, parameters, FLOPs, bytes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace cleave {

// A named value and its type, as listed in a summary.
struct NamedType {
  std::string name;
  TensorType type;
};

// Totals over a whole graph; tools print it as text (summaryText) or JSON.
struct GraphSummary {
  std::string graph_name;
  int64_t node_count = 0;
  std::vector<std::pair<std::string, int64_t>> op_counts;  // by count, most frequent first, ties by name
  int64_t parameter_tensors = 0;
  int64_t parameter_count = 0;  // elements over all parameters
  int64_t parameter_bytes = 0;
  int64_t frozen_tensors = 0;   // parameters that do not train (buffers, --freeze)
  int64_t frozen_count = 0;     // their elements
  std::vector<NamedType> inputs;
  std::vector<NamedType> outputs;
  double forward_flops = 0;  // sum of every node's cost rule
  double forward_bytes = 0;  // bytes the nodes read and write, per their cost rules
  // An estimate, not a count: a training step (forward, backward, update) is about 3x forward.
  double training_step_flops = 0;
};

// The factor from forward FLOPs to the training-step estimate (backward costs about twice forward).
constexpr double kTrainingStepFlopsPerForward = 3.0;

// Summarizes `graph`, which must verify (the cost rules assume well-formed nodes).
GraphSummary summarizeGraph(const Graph& graph);

// The summary as indented text lines, e.g. "parameters: 669,706 in 6 tensors (2.55 MiB)".
std::string summaryText(const GraphSummary& summary);

// `n` with thousands separators: 669706 -> "669,706".
std::string withThousands(int64_t n);
// `n` scaled with a metric prefix and `unit`: 1.2e12, "FLOP" -> "1.20 TFLOP".
std::string withMetricPrefix(double n, const std::string& unit);
// `bytes` in binary units: 2678824 -> "2.55 MiB".
std::string withBinaryPrefix(double bytes);

}  // namespace cleave
