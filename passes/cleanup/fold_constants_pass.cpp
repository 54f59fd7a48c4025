// The fold-constants pass: evaluates nodes whose operands are all constants into constant nodes.
#include <memory>

#include "ir/constant_eval.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status foldConstants(Graph& graph, const PassOptions& options) {
  const int64_t max_elements = options.getInt("max-elements");
  // constant_of[v]: v's contents when a constant node (original or folded) defines it.
  std::vector<std::shared_ptr<const TensorData>> constant_of(graph.values.size());
  std::vector<Node> rewritten;
  rewritten.reserve(graph.nodes.size());
  for (Node& node : graph.nodes) {
    // 1. Constants feed the folding of later nodes.
    if (node.op == OpId::constant) {
      constant_of[node.results[0]] = std::get<std::shared_ptr<const TensorData>>(node.attrs.at("value"));
      rewritten.push_back(std::move(node));
      continue;
    }
    // 2. A node folds when every operand is constant, the evaluator knows it, the results are
    //    not too large, and it is not dropout (random).
    std::vector<const TensorData*> operands;
    std::vector<TensorType> operand_types, result_types;
    for (ValueId v : node.operands) {
      if (constant_of[v]) operands.push_back(constant_of[v].get());
      operand_types.push_back(graph.values[v].type);
    }
    bool small_enough = true;
    for (ValueId r : node.results) {
      result_types.push_back(graph.values[r].type);
      small_enough = small_enough && graph.values[r].type.numel() <= max_elements;
    }
    const bool foldable = !opDef(node.op).random && !node.operands.empty() &&
                          operands.size() == node.operands.size() && small_enough &&
                          isConstantEvaluable(node.op, operand_types, result_types);
    if (!foldable) {
      rewritten.push_back(std::move(node));
      continue;
    }
    // 3. Evaluate and put one constant node per result in the node's place; each takes over
    //    its result value (name and type), so no use needs rewriting.
    auto results = evaluateConstantNode(node.op, node.attrs, operands, result_types);
    if (!results) return results.status().withContext(nodeContext(graph, node));
    for (size_t r = 0; r < node.results.size(); ++r) {
      if ((*results)[r].type != result_types[r])
        return Status::internal(nodeContext(graph, node) + "constant evaluation gave " + (*results)[r].type.str() +
                                ", the result is " + result_types[r].str());
      auto value = std::make_shared<const TensorData>(std::move((*results)[r]));
      constant_of[node.results[r]] = value;
      rewritten.push_back(Node{OpId::constant, {}, {node.results[r]}, {{"value", value}}, node.loc});
    }
  }
  // 4. Install the new node list; compact() refreshes every value's producer index.
  graph.nodes = std::move(rewritten);
  graph.compact();
  return Status::ok();
}

Status checkMaxElements(const PassOptions& options) {
  const int64_t max_elements = options.getInt("max-elements");
  if (max_elements < 0)
    return Status::usage("fold-constants: max-elements must not be negative, got " + std::to_string(max_elements));
  return Status::ok();
}

}  // namespace

PassInfo makeFoldConstantsPass() {
  return PassInfo{
      .name = "fold-constants",
      .summary = "evaluate nodes whose operands are all constants into constant nodes (dead constants are left for dce)",
      .options = {{"max-elements", int64_t{1000000}, "do not fold a node with a result of more elements than this"}},
      .run = foldConstants,
      .check_options = checkMaxElements,
  };
}

}  // namespace cleave
