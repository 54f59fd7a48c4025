// The cse pass: merges nodes that compute the same thing (same op, operands and attributes).
#include <map>
#include <numeric>
#include <utility>

#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

bool sameAttributes(const AttrMap& a, const AttrMap& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || !attrEquals(ia->second, ib->second)) return false;
  return true;
}

bool sameResultTypes(const Graph& graph, const Node& a, const Node& b) {
  if (a.results.size() != b.results.size()) return false;
  for (size_t r = 0; r < a.results.size(); ++r)
    if (graph.values[a.results[r]].type != graph.values[b.results[r]].type) return false;
  return true;
}

Status eliminateCommonSubexpressions(Graph& graph, const PassOptions&) {
  // replacement[v]: the value that now stands for v (v itself unless v's node was merged away).
  std::vector<ValueId> replacement(graph.values.size());
  std::iota(replacement.begin(), replacement.end(), ValueId{0});
  std::vector<bool> is_output(graph.values.size(), false);
  for (ValueId v : graph.outputs) is_output[v] = true;
  // Kept nodes by (op, operands); attributes are compared within a bucket.
  std::map<std::pair<OpId, std::vector<ValueId>>, std::vector<size_t>> kept;
  std::vector<bool> merged(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    // 1. Operands defined earlier may have been merged: point them at the kept node's results.
    for (ValueId& v : node.operands) v = replacement[v];
    // 2. Dropout draws random numbers, so two dropouts are never the same; sends and receives
    //    are events, never merged.
    if (opDef(node.op).random || opDef(node.op).side_effects) continue;
    // 3. Merge into the first equal node, unless this node defines a graph output: outputs keep
    //    their names, which are the model's interface.
    std::vector<size_t>& bucket = kept[{node.op, node.operands}];
    const Node* twin = nullptr;
    for (size_t k : bucket)
      if (sameAttributes(graph.nodes[k].attrs, node.attrs) && sameResultTypes(graph, graph.nodes[k], node)) {
        twin = &graph.nodes[k];
        break;
      }
    bool defines_output = false;
    for (ValueId r : node.results) defines_output = defines_output || is_output[r];
    if (twin && !defines_output) {
      for (size_t r = 0; r < node.results.size(); ++r) replacement[node.results[r]] = twin->results[r];
      merged[i] = true;
    } else {
      bucket.push_back(i);
    }
  }
  // 4. State updates may name a merged value; outputs never do (see 3).
  for (StateUpdate& update : graph.updates) update.new_value = replacement[update.new_value];
  graph.eraseNodes(merged);
  return Status::ok();
}

}  // namespace

PassInfo makeCsePass() {
  return PassInfo{
      .name = "cse",
      .summary = "merge nodes with the same op, operands and attributes into the first (never dropout)",
      .options = {},
      .run = eliminateCommonSubexpressions,
  };
}

}  // namespace cleave
