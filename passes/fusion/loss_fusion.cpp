// Loss fusion: softmax_cross_entropy and softmax_cross_entropy_grad into softmax_cross_entropy_and_grad.
#include "passes/fusion/loss_fusion.h"

#include "ir/op_table.h"

namespace cleave {
namespace {

int64_t ignoreIndexOf(const Node& node) {
  auto it = node.attrs.find("ignore_index");
  return it == node.attrs.end() ? std::get<int64_t>(opDef(node.op).findAttr("ignore_index")->default_value)
                                : std::get<int64_t>(it->second);
}

}  // namespace

Expected<int> fuseLossWithGradient(Graph& graph, std::vector<int64_t>* node_group) {
  const bool grouped = node_group && !node_group->empty();
  if (grouped && node_group->size() != graph.nodes.size())
    return Status::internal("loss fusion: " + std::to_string(node_group->size()) + " node groups for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<bool> dead(graph.nodes.size(), false);
  int fused = 0;
  for (int32_t g = 0; g < static_cast<int32_t>(graph.nodes.size()); ++g) {
    Node& gradient = graph.nodes[g];
    if (gradient.op != OpId::softmax_cross_entropy_grad || gradient.operands.size() != 3) continue;
    const ValueId dloss = gradient.operands[0], logits = gradient.operands[1], labels = gradient.operands[2];
    for (int32_t s : users[logits]) {
      const Node& loss = graph.nodes[s];
      if (s >= g || dead[s] || loss.op != OpId::softmax_cross_entropy || loss.operands[0] != logits ||
          loss.operands[1] != labels || ignoreIndexOf(loss) != ignoreIndexOf(gradient) ||
          (grouped && (*node_group)[s] != (*node_group)[g]))
        continue;
      bool read_before = false;  // the loss read by a node that the fused node, at g, would come after
      for (int32_t user : users[loss.results[0]]) read_before = read_before || user < g;
      if (read_before) continue;
      Node replacement{OpId::softmax_cross_entropy_and_grad,
                       {logits, labels, dloss},
                       {loss.results[0], gradient.results[0]},
                       {{"ignore_index", ignoreIndexOf(gradient)}},
                       gradient.loc};
      gradient = std::move(replacement);
      dead[s] = true;
      ++fused;
      break;
    }
  }
  if (fused > 0) graph.eraseNodes(dead, node_group);
  return fused;
}

}  // namespace cleave
