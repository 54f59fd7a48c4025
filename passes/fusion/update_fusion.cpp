// Update fusion: a scaled gradient's mul into the optimizer update that reads it; a weight
// gradient's matrix product into its SGD update.
#include "passes/fusion/update_fusion.h"

#include "ir/op_table.h"
#include "ir/ops/optimizer_ops.h"
#include "passes/training/optimizer.h"

namespace cleave {
namespace {

// The update's gradient scale operand, or -1 (from the node's operand types).
int gradientScaleOf(const Graph& graph, const Node& node) {
  std::vector<TensorType> operands, results;
  for (ValueId v : node.operands) operands.push_back(graph.values[v].type);
  for (ValueId v : node.results) results.push_back(graph.values[v].type);
  return ops::gradientScaleOperand(OpContext{opDef(node.op), operands, results, node.attrs});
}

// A matmul, or a gemm without c and with alpha 1 (an ONNX Gemm's weight gradient): op(a)·op(b).
bool isPlainProduct(const Node& node) {
  if (node.op == OpId::matmul) return true;
  return node.op == OpId::gemm && node.operands.size() == 2 &&
         OpContext{opDef(node.op), {}, {}, node.attrs}.getFloat("alpha") == 1.0;
}

// An error unless `node_group` is absent, empty or one group per node.
Status checkNodeGroups(const Graph& graph, const std::vector<int64_t>* node_group) {
  if (!node_group || node_group->empty() || node_group->size() == graph.nodes.size()) return Status::ok();
  return Status::internal("update fusion: " + std::to_string(node_group->size()) + " node groups for " +
                          std::to_string(graph.nodes.size()) + " nodes");
}

}  // namespace

Expected<int> foldGradientScalesIntoUpdates(Graph& graph, std::vector<int64_t>* node_group) {
  const bool grouped = node_group && !node_group->empty();
  CLEAVE_TRY(checkNodeGroups(graph, node_group));
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  const std::vector<bool> read_outside = graph.valuesReadAfterNodes();
  std::vector<bool> dead(graph.nodes.size(), false);
  int folded = 0;
  for (int32_t u = 0; u < static_cast<int32_t>(graph.nodes.size()); ++u) {
    Node& update = graph.nodes[u];
    if (!isOptimizerUpdate(update) || gradientScaleOf(graph, update) >= 0) continue;
    const ValueId scaled = update.operands[1];
    const int32_t m = graph.values[scaled].producer;
    if (m < 0 || graph.nodes[m].op != OpId::mul || graph.nodes[m].operands.size() != 2 || read_outside[scaled] ||
        users[scaled].size() != 1 || (grouped && (*node_group)[m] != (*node_group)[u]))
      continue;
    // mul(g, s) or mul(s, g): g of the gradient's type, s a scalar of its dtype.
    const TensorType& gradient_type = graph.values[scaled].type;
    const TensorType scalar{gradient_type.dtype, {}};
    const ValueId a = graph.nodes[m].operands[0], b = graph.nodes[m].operands[1];
    ValueId gradient = kNoValue, scale = kNoValue;
    if (graph.values[a].type == gradient_type && graph.values[b].type == scalar) gradient = a, scale = b;
    else if (graph.values[b].type == gradient_type && graph.values[a].type == scalar) gradient = b, scale = a;
    if (gradient == kNoValue) continue;
    update.operands[1] = gradient;
    update.operands.push_back(scale);
    dead[m] = true;
    ++folded;
  }
  if (folded > 0) graph.eraseNodes(dead, node_group);
  return folded;
}

Expected<int> foldWeightGradientsIntoUpdates(Graph& graph, std::vector<int64_t>* node_group) {
  const bool grouped = node_group && !node_group->empty();
  CLEAVE_TRY(checkNodeGroups(graph, node_group));
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  const std::vector<bool> read_outside = graph.valuesReadAfterNodes();
  std::vector<bool> dead(graph.nodes.size(), false);
  int folded = 0;
  for (int32_t u = 0; u < static_cast<int32_t>(graph.nodes.size()); ++u) {
    const Node& update = graph.nodes[u];
    // sgd_update(w, g, step, [buf]) without weight decay, nesterov or gradient scale.
    if (update.op != OpId::sgd_update || gradientScaleOf(graph, update) >= 0) continue;
    const OpContext sgd{opDef(update.op), {}, {}, update.attrs};
    if (sgd.getFloat("weight_decay") != 0.0 || sgd.getInt("nesterov") != 0) continue;
    const bool has_buffer = sgd.getFloat("momentum") != 0.0;
    const ValueId w = update.operands[0], gradient = update.operands[1], step = update.operands[2];
    const int32_t m = graph.values[gradient].producer;
    if (m < 0 || !isPlainProduct(graph.nodes[m]) || read_outside[gradient] || users[gradient].size() != 1 ||
        (grouped && (*node_group)[m] != (*node_group)[u]) || graph.values[step].producer >= m)
      continue;
    const Node& product = graph.nodes[m];
    const bool matrices =
        graph.values[product.operands[0]].type.rank() == 2 && graph.values[product.operands[1]].type.rank() == 2;
    if (!matrices) continue;
    // w and its buffer: made before the product, and read at or after it by the update alone.
    std::vector<ValueId> states = {w};
    if (has_buffer) states.push_back(update.operands[3]);
    bool read_later = false;
    for (ValueId state : states) {
      read_later = read_later || graph.values[state].producer >= m;
      for (int32_t reader : users[state]) read_later = read_later || (reader != u && reader >= m);
    }
    if (read_later) continue;
    // The product's node becomes the update, with the update's learning rate and schedule.
    AttrMap attrs = update.attrs;
    for (const char* sgd_only : {"weight_decay", "nesterov"}) attrs.erase(sgd_only);
    for (const char* flag : {"transpose_a", "transpose_b"})
      if (auto it = product.attrs.find(flag); it != product.attrs.end()) attrs[flag] = it->second;
    std::vector<ValueId> operands = {w, product.operands[0], product.operands[1], step};
    if (has_buffer) operands.push_back(update.operands[3]);
    Node fused{OpId::sgd_matmul_update, std::move(operands), update.results, std::move(attrs), product.loc};
    graph.nodes[m] = std::move(fused);
    dead[u] = true;
    ++folded;
  }
  if (folded > 0) graph.eraseNodes(dead, node_group);
  return folded;
}

}  // namespace cleave
