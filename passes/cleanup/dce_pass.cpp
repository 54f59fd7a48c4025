// The dce pass: removes nodes without side effects whose results reach no graph output and no state update.
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status eliminateDeadCode(Graph& graph, const PassOptions&) {
  // 1. Outputs and updated values are live; walking nodes backwards, a node with a live result
  //    makes its operands live.
  std::vector<bool> live_value = graph.valuesReadAfterNodes();
  std::vector<bool> dead_node(graph.nodes.size(), true);
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const Node& node = graph.nodes[i];
    if (opDef(node.op).side_effects) dead_node[i] = false;
    for (ValueId r : node.results)
      if (live_value[r]) dead_node[i] = false;
    if (dead_node[i]) continue;
    for (ValueId v : node.operands) live_value[v] = true;
  }
  // 2. Erase the rest; inputs and parameters are kept even when unused.
  graph.eraseNodes(dead_node);
  return Status::ok();
}

}  // namespace

PassInfo makeDcePass() {
  return PassInfo{
      .name = "dce",
      .summary = "remove nodes none of whose results reach an output or a state update (inputs, parameters and sends stay)",
      .options = {},
      .run = eliminateDeadCode,
  };
}

}  // namespace cleave
