// Mixed precision: the GEMM-bound ops rewritten to run in bf16 between casts.
#include "passes/training/autocast.h"

#include <map>
#include <string>
#include <vector>

#include "ir/appended_nodes.h"

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
  // 1. Per rewritten node: its casts, the bf16 op and the cast back, appended, then put in its place.
  std::map<ValueId, ValueId> bf16_copy;  // f32 value -> its bf16 cast
  std::map<ValueId, ValueId> replaced;   // old result -> the f32 result that replaces it
  AppendedNodes placed(graph);
  for (size_t i = 0; i < placed.original(); ++i) {
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
    placed.putBefore(i, first_new, graph.nodes.size());
    placed.drop(i);
  }
  if (replaced.empty()) return 0;
  // 2. Every use of an old result redirected, the new nodes in the old ones' places, ids renumbered.
  auto redirect = [&](ValueId& v) {
    auto it = replaced.find(v);
    if (it != replaced.end()) v = it->second;
  };
  for (Node& node : graph.nodes)
    for (ValueId& v : node.operands) redirect(v);
  for (ValueId& v : graph.outputs) redirect(v);
  for (StateUpdate& update : graph.updates) redirect(update.new_value);
  placed.apply(graph);
  return static_cast<int>(replaced.size());
}

}  // namespace cleave
