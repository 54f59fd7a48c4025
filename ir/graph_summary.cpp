// Graph summary: counts ops and parameters, sums the op table's cost rules, formats the totals.
#include "ir/graph_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace cleave {
namespace {

NamedType namedType(const Graph& graph, ValueId v) { return NamedType{graph.values[v].name, graph.values[v].type}; }

std::string formatFixed(double n, const char* format) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, n);
  return buffer;
}

std::string typedValues(const std::vector<NamedType>& values) {
  std::string text;
  for (const auto& v : values) text += (text.empty() ? "" : ", ") + ("%" + v.name + " : " + v.type.str());
  return text.empty() ? "(none)" : text;
}

}  // namespace

GraphSummary summarizeGraph(const Graph& graph) {
  GraphSummary summary;
  summary.graph_name = graph.name;
  summary.node_count = static_cast<int64_t>(graph.nodes.size());

  // 1. Per node: count its op and add its cost rule's FLOPs and bytes.
  std::map<std::string, int64_t> counts;
  std::vector<TensorType> operand_types, result_types;
  for (const Node& node : graph.nodes) {
    const OpDef& def = opDef(node.op);
    ++counts[std::string(def.name)];
    operand_types.clear();
    result_types.clear();
    for (ValueId v : node.operands) operand_types.push_back(graph.values[v].type);
    for (ValueId v : node.results) result_types.push_back(graph.values[v].type);
    OpCost cost = def.cost(OpContext{def, operand_types, result_types, node.attrs});
    summary.forward_flops += cost.flops;
    summary.forward_bytes += cost.bytes;
  }
  summary.training_step_flops = kTrainingStepFlopsPerForward * summary.forward_flops;

  // 2. The op histogram, most frequent first.
  summary.op_counts.assign(counts.begin(), counts.end());
  std::stable_sort(summary.op_counts.begin(), summary.op_counts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });

  // 3. Parameters, inputs and outputs.
  for (const Param& param : graph.params) {
    const TensorType& type = graph.values[param.value].type;
    ++summary.parameter_tensors;
    summary.parameter_count += type.numel();
    summary.parameter_bytes += type.bytes();
    if (!param.trainable) {
      ++summary.frozen_tensors;
      summary.frozen_count += type.numel();
    }
  }
  for (ValueId v : graph.inputs) summary.inputs.push_back(namedType(graph, v));
  for (ValueId v : graph.outputs) summary.outputs.push_back(namedType(graph, v));
  return summary;
}

std::string summaryText(const GraphSummary& s) {
  std::string ops;
  for (const auto& [name, count] : s.op_counts) ops += (ops.empty() ? "" : ", ") + name + " " + withThousands(count);
  std::string text;
  text += "graph @" + s.graph_name + "\n";
  text += "  inputs:        " + typedValues(s.inputs) + "\n";
  text += "  outputs:       " + typedValues(s.outputs) + "\n";
  text += "  nodes:         " + withThousands(s.node_count) + " (" + (ops.empty() ? "none" : ops) + ")\n";
  text += "  parameters:    " + withThousands(s.parameter_count) + " in " + withThousands(s.parameter_tensors) +
          " tensors, " + withBinaryPrefix(static_cast<double>(s.parameter_bytes)) +
          (s.frozen_tensors == 0 ? std::string()
                                 : "; " + withThousands(s.frozen_count) + " in " + withThousands(s.frozen_tensors) +
                                       (s.frozen_tensors == 1 ? " tensor" : " tensors") + " frozen") +
          "\n";
  text += "  forward pass:  " + withMetricPrefix(s.forward_flops, "FLOP") + ", " +
          withBinaryPrefix(s.forward_bytes) + " moved\n";
  text += "  training step: " + withMetricPrefix(s.training_step_flops, "FLOP") + " (estimate: " +
          formatFixed(kTrainingStepFlopsPerForward, "%.0f") + "x forward)\n";
  return text;
}

std::string withThousands(int64_t n) {
  const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  const std::string digits = std::to_string(magnitude);
  std::string text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return n < 0 ? "-" + text : text;
}

std::string withMetricPrefix(double n, const std::string& unit) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int power = 0;
  while (std::fabs(n) >= 1000.0 && power < 6) {
    n /= 1000.0;
    ++power;
  }
  return formatFixed(n, power == 0 ? "%.0f " : "%.2f ") + kPrefixes[power] + unit;
}

std::string withBinaryPrefix(double bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int power = 0;
  while (std::fabs(bytes) >= 1024.0 && power < 6) {
    bytes /= 1024.0;
    ++power;
  }
  return formatFixed(bytes, power == 0 ? "%.0f " : "%.2f ") + kUnits[power];
}

}  // namespace cleave
