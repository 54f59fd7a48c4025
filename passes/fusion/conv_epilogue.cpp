// Convolution epilogues: conv2d + [residual add] + [relu] become one fused_conv2d.
#include "passes/fusion/conv_epilogue.h"

namespace cleave {
namespace {

class ConvEpilogueFusion {
 public:
  ConvEpilogueFusion(Graph& graph, std::vector<int64_t>* node_group)
      : graph_(graph), node_group_(node_group && !node_group->empty() ? node_group : nullptr),
        users_(graph.computeUsers()), is_root_(graph.valuesReadAfterNodes()) {}

  int run() {
    if (graph_.trains()) return 0;
    std::vector<bool> dead(graph_.nodes.size(), false), changed(graph_.nodes.size(), false);
    int fused = 0;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& conv = graph_.nodes[i];
      if (conv.op != OpId::conv2d || conv.operands.size() != 3 || graph_.values[conv.results[0]].type.dtype != DType::kF32)
        continue;
      // The epilogue: an add of a residual, a relu, or an add then a relu, each the only reader of
      // what comes before it.
      const int32_t first = soleUserInGroup(conv.results[0], i);
      if (first < 0 || changed[first]) continue;  // e.g. a residual add another conv2d took already
      std::vector<ValueId> operands = conv.operands;
      int32_t last = first;
      const Node& next = graph_.nodes[first];
      if (next.op == OpId::add) {
        const ValueId c = conv.results[0];
        const ValueId residual = next.operands[0] == c ? next.operands[1] : next.operands[0];
        if (residual == c || graph_.values[residual].type != graph_.values[c].type) continue;
        operands.push_back(residual);
        const int32_t after = soleUserInGroup(next.results[0], i);
        if (after >= 0 && !changed[after] && graph_.nodes[after].op == OpId::relu) last = after;
      } else if (next.op != OpId::relu) {
        continue;
      }
      AttrMap attrs = conv.attrs;
      attrs["activation"] = std::string(graph_.nodes[last].op == OpId::relu ? "relu" : "none");
      Node fused_node{OpId::fused_conv2d, std::move(operands), graph_.nodes[last].results, std::move(attrs), conv.loc};
      dead[i] = changed[i] = changed[first] = changed[last] = true;
      if (last != first) dead[first] = true;
      graph_.nodes[last] = std::move(fused_node);
      ++fused;
    }
    if (fused == 0) return 0;
    graph_.eraseNodes(dead, node_group_);
    return fused;
  }

 private:
  // The one node reading `v` (once), of the group of node `origin`; -1 when `v` is an output, is
  // read by several nodes or twice, or its reader is in another group.
  int32_t soleUserInGroup(ValueId v, size_t origin) const {
    if (is_root_[v] || users_[v].size() != 1) return -1;
    const int32_t user = users_[v][0];
    if (node_group_ && (*node_group_)[user] != (*node_group_)[origin]) return -1;
    return user;
  }

  Graph& graph_;
  std::vector<int64_t>* node_group_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> is_root_;
};

}  // namespace

Expected<int> fuseConvEpilogues(Graph& graph, std::vector<int64_t>* node_group) {
  return ConvEpilogueFusion(graph, node_group).run();
}

}  // namespace cleave
