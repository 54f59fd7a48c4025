// Optimizer state sharded over data-parallel replicas: each update reads and writes one block of
// the parameter along its first dim that divides by the replicas, and the updated blocks are
// all-gathered.
#include "passes/training/optimizer_sharding.h"

#include "passes/training/gradient_buckets.h"
#include "passes/training/optimizer.h"
#include "ir/device_mesh.h"

#include <map>
#include <set>
#include <string>

namespace cleave {

void holdDataParallelBlock(Graph& graph, Param& param, int64_t dim, int dp_size, int dp_index) {
  TensorType& type = graph.values[param.value].type;
  const int64_t block = type.shape[dim] / dp_size;
  if (param.full_shape.empty()) {
    param.full_shape = type.shape;
    param.shard_offset.assign(type.shape.size(), 0);
  }
  param.shard_offset[dim] += dp_index * block;
  param.shard_steps.push_back({dim, std::string(kDataAxis), block});
  type.shape[dim] = block;
}

Status shardOptimizerState(Graph& graph, int dp_size, int dp_index) {
  if (dp_size < 2)
    return Status::usage("optimizer sharding needs 2 or more data-parallel replicas, got " + std::to_string(dp_size));
  if (dp_index < 0 || dp_index >= dp_size)
    return Status::usage("optimizer sharding: replica " + std::to_string(dp_index) + " is not one of " +
                         std::to_string(dp_size));
  const size_t original_nodes = graph.nodes.size();
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<bool> read_outside(graph.values.size(), false);  // a graph output or a state update's value
  for (ValueId v : graph.outputs) read_outside[v] = true;
  for (const StateUpdate& u : graph.updates) read_outside[u.new_value] = true;
  std::vector<std::vector<int32_t>> emitted_instead(original_nodes);  // per replaced update: its new nodes
  std::vector<std::vector<int32_t>> emitted_after(original_nodes);    // per gradient all-reduce: reduce-scatters
  std::vector<std::set<size_t>> taken_from(original_nodes);           // per gradient all-reduce: results it loses
  std::map<ValueId, ValueId> next_value_of;                            // old update result -> its replacement
  for (size_t i = 0; i < original_nodes; ++i) {
    const Node update = graph.nodes[i];  // a copy: adding nodes moves them
    if (!isOptimizerUpdate(update)) continue;
    const ValueId param = update.operands[0];
    const TensorType type = graph.values[param].type;
    // The first dim that divides by the replicas (dim 0, rows, for most; a vocabulary of 50257
    // rows splits along its columns).
    int64_t dim = 0;
    while (dim < type.rank() && type.shape[dim] % dp_size != 0) ++dim;
    if (dim == type.rank()) continue;  // no dim divides: the update stays whole
    const AttrMap block_of_rows = {{"axis", std::string("dp")}, {"group_size", int64_t{dp_size}}, {"dim", dim}};
    AttrMap summed_block = block_of_rows;
    summed_block["reduce"] = std::string("sum");
    const size_t first_new = graph.nodes.size();
    // 1. This replica's rows of the parameter and of its gradient summed over the replicas. When
    //    the update alone reads the sum of a data-parallel all-reduce (no output, no clipping), a
    //    reduce-scatter of the unsummed gradient takes that result's place (ZeRO's way: no replica
    //    sums rows it does not update); otherwise the rows of the sum.
    std::vector<ValueId> operands = update.operands;
    const ValueId grad = operands[1];
    int32_t reduce_scatter = -1;  // its index, when the gradient is reduce-scattered
    const int32_t summed_by = graph.values[grad].producer;
    if (summed_by >= 0 && isDataParallelGradientSum(graph.nodes[summed_by]) && users[grad].size() == 1 &&
        !read_outside[grad]) {
      const size_t k = static_cast<size_t>(graph.values[grad].result_index);
      const ValueId unsummed = graph.nodes[summed_by].operands[k];
      const SourceLoc loc = graph.nodes[summed_by].loc;
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> block,
                              graph.addNode(OpId::reduce_scatter, {unsummed}, summed_block, loc,
                                            {graph.values[grad].name + ".block"}));
      reduce_scatter = static_cast<int32_t>(graph.nodes.size() - 1);
      emitted_after[summed_by].push_back(reduce_scatter);
      taken_from[summed_by].insert(k);
      operands[1] = block[0];
    } else {
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> block,
                              graph.addNode(OpId::shard_slice, {grad}, block_of_rows, update.loc,
                                            {graph.values[grad].name + ".block"}));
      operands[1] = block[0];
    }
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> param_block,
                            graph.addNode(OpId::shard_slice, {param}, block_of_rows, update.loc,
                                          {graph.values[param].name + ".block"}));
    operands[0] = param_block[0];
    // 2. The state (the operands of the parameter's type, not the step counter) becomes the block.
    for (size_t o = 2; o < operands.size(); ++o) {
      if (graph.values[operands[o]].type != type) continue;
      Param* state = graph.findParam(operands[o]);
      if (!state || state->trainable)
        return Status::internal("optimizer sharding: operand " + std::to_string(o) + " of the update of '%" +
                                graph.values[param].name + "' is not an optimizer state");
      holdDataParallelBlock(graph, *state, dim, dp_size, dp_index);
    }
    // 3. The update of the blocks, under the old results' names; the parameter's next value is
    //    the blocks of every replica gathered.
    std::vector<std::string> names;
    for (ValueId r : update.results) {
      names.push_back(graph.values[r].name);
      CLEAVE_TRY(graph.renameValue(r, graph.uniqueName(graph.values[r].name + ".whole")));
    }
    const std::string param_next = names[0];
    names[0] += ".block";
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph.addNode(update.op, std::move(operands), update.attrs, update.loc, std::move(names)));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> gathered,
                            graph.addNode(OpId::all_gather, {results[0]}, block_of_rows, update.loc, {param_next}));
    next_value_of[update.results[0]] = gathered[0];
    for (size_t r = 1; r < results.size(); ++r) next_value_of[update.results[r]] = results[r];
    for (size_t n = first_new; n < graph.nodes.size(); ++n)
      if (static_cast<int32_t>(n) != reduce_scatter) emitted_instead[i].push_back(static_cast<int32_t>(n));
  }
  if (next_value_of.empty()) return Status::ok();
  // 4. Readers of the old results (the state updates) read the new ones; the new nodes take the old
  //    updates' places, and those go.
  auto redirect = [&](ValueId& v) {
    if (auto it = next_value_of.find(v); it != next_value_of.end()) v = it->second;
  };
  for (StateUpdate& u : graph.updates) redirect(u.new_value);
  for (ValueId& v : graph.outputs) redirect(v);
  for (Node& node : graph.nodes)
    for (ValueId& v : node.operands) redirect(v);
  std::vector<Node> ordered;
  ordered.reserve(graph.nodes.size());
  for (size_t i = 0; i < original_nodes; ++i) {
    if (!emitted_instead[i].empty()) {
      for (int32_t n : emitted_instead[i]) ordered.push_back(std::move(graph.nodes[n]));
      continue;
    }
    Node& node = graph.nodes[i];
    if (!taken_from[i].empty()) {  // a bucket without the gradients now reduce-scattered
      Node kept{node.op, {}, {}, node.attrs, node.loc};
      for (size_t k = 0; k < node.results.size(); ++k) {
        if (taken_from[i].count(k)) continue;
        kept.operands.push_back(node.operands[k]);
        kept.results.push_back(node.results[k]);
      }
      if (!kept.results.empty()) ordered.push_back(std::move(kept));
    } else {
      ordered.push_back(std::move(node));
    }
    for (int32_t n : emitted_after[i]) ordered.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(ordered);
  graph.compact();  // drops the old updates' results, renumbers the producers
  return Status::ok();
}

}  // namespace cleave
