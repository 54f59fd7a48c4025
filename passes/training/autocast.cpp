// Mixed precision: the GEMM-bound ops rewritten to run in bf16 between casts.
#include "passes/training/autocast.h"

#include <map>
#include <string>
#include <vector>

namespace cleave {
namespace {

bool runsInLowPrecision(OpId op) { return op == OpId::matmul || op == OpId::gemm || op == OpId::conv2d; }

}  // namespace

Expected<Precision> parsePrecision(std::string_view name) {
  if (name == "f32") return Precision::kF32;
  if (name == "bf16") return Precision::kBF16;
  return Status::usage("unknown precision '" + std::string(name) + "' (expected f32 or bf16)");
}

std::string_view precisionName(Precision precision) { return precision == Precision::kBF16 ? "bf16" : "f32"; }

Expected<int> autocastToBf16(Graph& graph) {
  // 1. Per rewritten node: its casts, the bf16 op and the cast back, appended, then moved before it.
  std::map<ValueId, ValueId> bf16_copy;           // f32 value -> its bf16 cast
  std::map<size_t, std::vector<Node>> rewritten;  // node index -> the nodes replacing it
  std::map<ValueId, ValueId> replaced;            // old result -> the f32 result that replaces it
  const size_t original = graph.nodes.size();
  for (size_t i = 0; i < original; ++i) {
    const Node node = graph.nodes[i];  // a copy: appending nodes moves the vector
    if (!runsInLowPrecision(node.op) || node.results.size() != 1) continue;
    bool all_f32 = true;
    for (ValueId v : node.operands) all_f32 = all_f32 && graph.values[v].type.dtype == DType::kF32;
    if (!all_f32 || graph.values[node.results[0]].type.dtype != DType::kF32) continue;
    const size_t first_new = graph.nodes.size();
    std::vector<ValueId> operands;
    for (ValueId v : node.operands) {
      auto copy = bf16_copy.find(v);
      if (copy == bf16_copy.end()) {
        CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> cast, graph.addNode(OpId::cast, {v}, {{"to", std::string("bf16")}}, node.loc,
                                                                         {graph.uniqueName(graph.values[v].name + ".bf16")}));
        copy = bf16_copy.emplace(v, cast[0]).first;
      }
      operands.push_back(copy->second);
    }
    const ValueId result = node.results[0];
    const std::string name = graph.values[result].name;
    CLEAVE_TRY(graph.renameValue(result, graph.uniqueName(name + ".f32")));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> low, graph.addNode(node.op, std::move(operands), node.attrs, node.loc,
                                                                    {graph.uniqueName(name + ".bf16")}));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> back, graph.addNode(OpId::cast, {low[0]}, {{"to", std::string("f32")}}, node.loc, {name}));
    replaced[result] = back[0];
    for (size_t k = first_new; k < graph.nodes.size(); ++k) rewritten[i].push_back(std::move(graph.nodes[k]));
    graph.nodes.resize(first_new);
  }
  if (rewritten.empty()) return 0;
  // 2. The new nodes in the old ones' places, every use of an old result redirected, ids renumbered.
  std::vector<Node> nodes;
  for (size_t i = 0; i < original; ++i) {
    auto it = rewritten.find(i);
    if (it == rewritten.end()) {
      nodes.push_back(std::move(graph.nodes[i]));
      continue;
    }
    for (Node& node : it->second) nodes.push_back(std::move(node));
  }
  auto redirect = [&](ValueId& v) {
    auto it = replaced.find(v);
    if (it != replaced.end()) v = it->second;
  };
  for (Node& node : nodes)
    for (ValueId& v : node.operands) redirect(v);
  for (ValueId& v : graph.outputs) redirect(v);
  for (StateUpdate& update : graph.updates) redirect(update.new_value);
  graph.nodes = std::move(nodes);
  graph.compact();
  return static_cast<int>(rewritten.size());
}

}  // namespace cleave
