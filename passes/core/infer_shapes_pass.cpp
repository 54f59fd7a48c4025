// The infer-shapes pass: recomputes every result type from the op table, optionally with a new batch size.
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status inferShapes(Graph& graph, const PassOptions& options) {
  // 1. With a batch size, every graph input of rank ≥ 1 gets it as dim 0 (scalars are left alone).
  const int64_t batch = options.getInt("batch");
  for (ValueId input : graph.inputs)
    if (batch > 0 && graph.values[input].type.rank() > 0) graph.values[input].type.shape[0] = batch;
  // 2. Recompute each node's result types from its operands, in program order.
  const std::string because = batch > 0 ? " (with batch " + std::to_string(batch) + ")" : "";
  for (const Node& node : graph.nodes) {
    std::vector<TensorType> operand_types;
    for (ValueId v : node.operands) operand_types.push_back(graph.values[v].type);
    auto result_types = inferResultTypes(opDef(node.op), operand_types, node.attrs);
    if (!result_types) {
      const Status& error = result_types.status();
      return Status::error(error.kind(), nodeContext(graph, node) + error.message() + because);
    }
    if (result_types->size() != node.results.size())
      return Status::badInput(nodeContext(graph, node) + "has " + std::to_string(node.results.size()) +
                              " result(s), the op gives " + std::to_string(result_types->size()));
    for (size_t r = 0; r < node.results.size(); ++r) graph.values[node.results[r]].type = (*result_types)[r];
  }
  return Status::ok();
}

Status checkBatch(const PassOptions& options) {
  const int64_t batch = options.getInt("batch");
  if (batch < 0) return Status::usage("infer-shapes: batch must not be negative, got " + std::to_string(batch));
  return Status::ok();
}

}  // namespace

PassInfo makeInferShapesPass() {
  return PassInfo{
      .name = "infer-shapes",
      .summary = "recompute every result type from its operands (optionally setting dim 0 of every input)",
      .options = {{"batch", int64_t{0}, "set dim 0 of every graph input to this before inferring (0: keep)"}},
      .run = inferShapes,
      .check_options = checkBatch,
  };
}

}  // namespace cleave
