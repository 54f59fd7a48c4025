// Gradients summed over microbatches in blocks (ZeRO stage 2): the reduce-scatter of the sum moves
// into the sum, one per microbatch's part.
#include "passes/training/gradient_sharding.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "passes/training/gradient_buckets.h"

namespace cleave {
namespace {

// Whether `v` is expand(constant 0): the start of a sum over microbatches.
bool isZeros(const Graph& graph, ValueId v) {
  const int32_t expand = graph.values[v].producer;
  if (expand < 0 || graph.nodes[expand].op != OpId::expand) return false;
  const int32_t constant = graph.values[graph.nodes[expand].operands[0]].producer;
  if (constant < 0 || graph.nodes[constant].op != OpId::constant) return false;
  auto value = graph.nodes[constant].attrs.find("value");
  if (value == graph.nodes[constant].attrs.end()) return false;
  const auto* data = std::get_if<std::shared_ptr<const TensorData>>(&value->second);
  return data && *data && std::all_of((*data)->bytes.begin(), (*data)->bytes.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

Expected<int> shardGradientSums(Graph& graph) {
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<bool> read_outside(graph.values.size(), false);  // a graph output or a state update's value
  for (ValueId v : graph.outputs) read_outside[v] = true;
  for (const StateUpdate& u : graph.updates) read_outside[u.new_value] = true;
  const size_t original = graph.nodes.size();
  std::map<size_t, std::vector<Node>> before;  // a node's index -> new nodes to run right before it
  std::vector<bool> dropped(original, false);
  std::map<ValueId, ValueId> block_sum_of;  // a dropped reduce-scatter's result -> the sum of blocks
  int sharded = 0;
  for (size_t i = 0; i < original; ++i) {
    if (!isOverDataParallel(graph.nodes[i], OpId::reduce_scatter)) continue;
    const Node scatter = graph.nodes[i];  // a copy: adding nodes moves them
    const ValueId sum = scatter.operands[0];
    if (users[sum].size() != 1 || read_outside[sum]) continue;
    const TensorType whole = graph.values[sum].type;
    const TensorType block = graph.values[scatter.results[0]].type;
    // 1. The sum's adds, last first: add(add(g0, g1), g2)... (or add(add(zeros, g0), g1)...), each
    //    intermediate sum read by the next add alone, each part of the whole type.
    std::vector<int32_t> adds;
    ValueId running = sum;
    for (;;) {
      if (isZeros(graph, running)) break;
      if (running != sum && (users[running].size() != 1 || read_outside[running])) break;
      const int32_t add = graph.values[running].producer;
      if (add < 0 || graph.nodes[add].op != OpId::add || graph.values[graph.nodes[add].operands[0]].type != whole ||
          graph.values[graph.nodes[add].operands[1]].type != whole)
        break;
      adds.push_back(add);
      running = graph.nodes[add].operands[0];
    }
    if (adds.empty()) continue;
    // 2. Every running sum becomes a block; each part, the first too, is reduce-scattered (or the
    //    zeros become a block of zeros).
    auto scatterBefore = [&](int32_t add, size_t operand) -> Status {
      const ValueId part = graph.nodes[add].operands[operand];
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> part_block,
                              graph.addNode(OpId::reduce_scatter, {part}, scatter.attrs, scatter.loc,
                                            {graph.uniqueName(graph.values[part].name + ".block")}));
      // Right after the part is computed, so that it is freed at once (the schedule keeps program
      // order within a step, and the add, combining microbatches, follows its last operand).
      const int32_t producer = graph.values[part].producer;
      before[producer >= 0 ? static_cast<size_t>(producer) + 1 : static_cast<size_t>(add)].push_back(
          std::move(graph.nodes.back()));
      graph.nodes.pop_back();
      graph.nodes[add].operands[operand] = part_block[0];
      return Status::ok();
    };
    const int32_t first_add = adds.back();
    if (!isZeros(graph, running)) {
      CLEAVE_TRY(scatterBefore(first_add, 0));
    } else if (users[running].size() == 1) {
      graph.nodes[graph.values[running].producer].attrs["shape"] = block.shape;
      graph.values[running].type = block;
    } else {  // zeros other sums start from too (cse merged them): new ones, right before the first add
      Node expand = graph.nodes[graph.values[running].producer];
      expand.attrs["shape"] = block.shape;
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> block_zeros,
                              graph.addNode(OpId::expand, expand.operands, expand.attrs, expand.loc,
                                            {graph.uniqueName(graph.values[running].name + ".block")}));
      before[static_cast<size_t>(first_add)].push_back(std::move(graph.nodes.back()));
      graph.nodes.pop_back();
      graph.nodes[first_add].operands[0] = block_zeros[0];
    }
    for (auto it = adds.rbegin(); it != adds.rend(); ++it) {
      CLEAVE_TRY(scatterBefore(*it, 1));
      graph.values[graph.nodes[*it].results[0]].type = block;
    }
    // 3. The sum of blocks takes the reduce-scatter's place (and its name: the update reads P.grad.block).
    dropped[i] = true;
    block_sum_of[scatter.results[0]] = sum;
    const std::string name = graph.values[scatter.results[0]].name;
    CLEAVE_TRY(graph.renameValue(scatter.results[0], graph.uniqueName(name + ".dropped")));
    CLEAVE_TRY(graph.renameValue(sum, name));
    ++sharded;
  }
  if (sharded == 0) return 0;
  // 4. Readers of the dropped results read the sums; nodes in their new order, then renumbered.
  auto redirect = [&](ValueId& v) {
    if (auto it = block_sum_of.find(v); it != block_sum_of.end()) v = it->second;
  };
  for (StateUpdate& u : graph.updates) redirect(u.new_value);
  for (ValueId& v : graph.outputs) redirect(v);
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + before.size());
  for (size_t i = 0; i <= original; ++i) {
    if (auto it = before.find(i); it != before.end())
      for (Node& node : it->second) nodes.push_back(std::move(node));
    if (i == original || dropped[i]) continue;
    Node& node = graph.nodes[i];
    for (ValueId& v : node.operands) redirect(v);
    nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
  graph.compact();
  return sharded;
}

}  // namespace cleave
