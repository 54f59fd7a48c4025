// Winograd convolutions: 3x3 convolutions of graphs that do not train may use a Winograd algorithm.
#include "passes/algorithm/winograd.h"

namespace cleave {
namespace {

bool computableByWinograd(const Graph& graph, const Node& node) {
  if (node.op != OpId::conv2d && node.op != OpId::fused_conv2d) return false;
  if (graph.values[node.results[0]].type.dtype != DType::kF32) return false;
  const Shape& w = graph.values[node.operands[1]].type.shape;
  if (w.size() != 4 || w[2] != 3 || w[3] != 3) return false;
  const OpContext attrs{opDef(node.op), {}, {}, node.attrs};
  const std::vector<int64_t> ones = {1, 1};
  return attrs.getInt("groups") == 1 && attrs.getInts("strides") == ones && attrs.getInts("dilations") == ones;
}

}  // namespace

Expected<int> allowWinogradConvolutions(Graph& graph) {
  if (graph.trains()) return 0;
  int marked = 0;
  for (Node& node : graph.nodes) {
    if (!computableByWinograd(graph, node)) continue;
    node.attrs["allow_winograd"] = int64_t{1};
    ++marked;
  }
  return marked;
}

}  // namespace cleave
