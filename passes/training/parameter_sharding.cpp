// Parameters sharded over data-parallel replicas (ZeRO stage 3): blocks held, whole parameters
// all-gathered per schedule step, one parameter ahead of their readers.
#include "passes/training/parameter_sharding.h"

#include <algorithm>
#include <utility>

#include "ir/device_mesh.h"
#include "passes/training/gradient_buckets.h"
#include "passes/training/optimizer_sharding.h"
#include "passes/training/optimizer.h"

namespace cleave {
namespace {

Status checkReplicas(int dp_size, int dp_index) {
  if (dp_size < 2)
    return Status::usage("parameter sharding needs 2 or more data-parallel replicas, got " + std::to_string(dp_size));
  if (dp_index < 0 || dp_index >= dp_size)
    return Status::usage("parameter sharding: replica " + std::to_string(dp_index) + " is not one of " +
                         std::to_string(dp_size));
  return Status::ok();
}

// The parameters of `dims` become blocks; each other reader of one reads it all-gathered over dp,
// one gather per (microbatch, forward or backward) step, issued before the first reader of the
// parameter gathered before it in that step. Nodes marked in `dead` go; nodes in `reads_block` read
// the block itself (the optimizer's updates).
Status blockAndGather(Graph& graph, std::vector<PipelineNodeLabel>& labels, int stage, const ShardedParameterDims& dims,
                      int dp_size, int dp_index, std::vector<bool> dead, const std::vector<bool>& reads_block) {
  CLEAVE_TRY(checkReplicas(dp_size, dp_index));
  if (labels.size() != graph.nodes.size())
    return Status::internal("parameter sharding: " + std::to_string(labels.size()) + " labels for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  const std::vector<bool> forward = forwardNodes(graph, stage);
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  // 1. Per parameter and step: its readers there, the first one's index.
  struct Gather {
    ValueId param;                 // what is gathered: a parameter's block, or a cast of it
    int64_t dim;
    std::vector<ValueId> aliases;  // the values readers read it as (the parameter and its gradient marks)
    std::vector<int32_t> readers;  // in program order
    size_t at = 0;                 // the node it runs before
  };
  using StepKey = std::pair<int, bool>;  // the step's microbatch (-1: outside every step), backward
  std::map<StepKey, std::vector<Gather>> gathers_of_step;
  std::vector<bool> first(graph.nodes.size(), false);  // casts of blocks, which run before every other node
  for (Param& param : graph.params) {
    auto dim = dims.find(graph.values[param.value].name);
    if (dim == dims.end()) continue;
    const TensorType& type = graph.values[param.value].type;
    if (dim->second < 0 || dim->second >= type.rank() || type.shape[dim->second] % dp_size != 0)
      return Status::internal("parameter sharding: '%" + graph.values[param.value].name + "' (" + type.str() +
                              ") does not split in " + std::to_string(dp_size) + " along dim " +
                              std::to_string(dim->second));
    // The parameter's readers, through the marks that sum its gradient over devices
    // (grad_all_reduce: the identity in the forward pass, which autodiff has used); the marks go.
    std::vector<ValueId> aliases = {param.value};
    std::vector<int32_t> readers;
    for (size_t a = 0; a < aliases.size(); ++a) {
      for (int32_t n : users[aliases[a]]) {
        if (dead[n] || reads_block[n]) continue;
        if (graph.nodes[n].op == OpId::grad_all_reduce) {
          dead[n] = true;
          aliases.push_back(graph.nodes[n].results[0]);
          continue;
        }
        readers.push_back(n);
      }
    }
    std::sort(readers.begin(), readers.end());
    readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
    // A cast of the parameter (its bf16 copy under autocast) casts the block instead, and its
    // readers gather the cast block: the same values, half the bytes moved, and no whole copy kept
    // from the first step to the last (as FSDP's mixed precision gathers bf16 parameters).
    Shape block_shape = type.shape;
    block_shape[dim->second] /= dp_size;
    std::vector<int32_t> own_readers;
    auto gatherPerStep = [&](ValueId source, const std::vector<ValueId>& read_as, const std::vector<int32_t>& by) {
      std::map<StepKey, Gather> mine;
      for (int32_t n : by) {
        const PipelineNodeLabel& label = labels[n];
        StepKey key{label.microbatch, !forward[n]};
        mine.try_emplace(key, Gather{source, dim->second, read_as, {}, 0}).first->second.readers.push_back(n);
      }
      for (auto& [key, gather] : mine) gathers_of_step[key].push_back(std::move(gather));
    };
    for (int32_t n : readers) {
      Node& cast = graph.nodes[n];
      if (cast.op != OpId::cast || cast.operands.size() != 1 || cast.results.size() != 1) {
        own_readers.push_back(n);
        continue;
      }
      cast.operands[0] = param.value;
      first[n] = true;  // cast before everything, so that its gathers can run ahead of their readers
      const ValueId cast_block = cast.results[0];
      graph.values[cast_block].type.shape = block_shape;
      std::vector<int32_t> cast_readers;
      for (int32_t user : users[cast_block])
        if (cast_readers.empty() || cast_readers.back() != user) cast_readers.push_back(user);
      gatherPerStep(cast_block, {cast_block}, cast_readers);
    }
    gatherPerStep(param.value, aliases, own_readers);
    holdDataParallelBlock(graph, param, dim->second, dp_size, dp_index);
    if (param.init.kind == "data" && param.init.data) {  // imported weights: this replica's block of the data
      const TensorType& block = graph.values[param.value].type;
      Shape start(block.shape.size(), 0);
      start[dim->second] = dp_index * block.shape[dim->second];
      param.init.data = std::make_shared<const TensorData>(dataBlock(*param.init.data, start, block.shape));
    }
  }
  // 2. Where each runs: a step's gathers in the order of their first readers, each before the first
  //    reader of the one before it (the first before its own).
  std::map<size_t, std::vector<std::pair<Node, PipelineNodeLabel>>> before;  // node index -> gathers to run before it
  for (auto& [key, gathers] : gathers_of_step) {
    std::sort(gathers.begin(), gathers.end(),
              [](const Gather& a, const Gather& b) { return a.readers.front() < b.readers.front(); });
    for (size_t k = 0; k < gathers.size(); ++k) {
      Gather& gather = gathers[k];
      gather.at = static_cast<size_t>(gathers[k == 0 ? 0 : k - 1].readers.front());
      const std::string& name = graph.values[gather.param].name;
      AttrMap attrs{{"axis", std::string(kDataAxis)}, {"group_size", int64_t{dp_size}}, {"dim", gather.dim}};
      const SourceLoc loc = graph.nodes[gather.readers.front()].loc;
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> whole,
                              graph.addNode(OpId::all_gather, {gather.param}, std::move(attrs), loc,
                                            {graph.uniqueName(name + ".whole")}));
      for (int32_t n : gather.readers)
        for (ValueId& v : graph.nodes[n].operands)
          if (std::find(gather.aliases.begin(), gather.aliases.end(), v) != gather.aliases.end()) v = whole[0];
      before[gather.at].emplace_back(std::move(graph.nodes.back()), labels[gather.readers.front()]);
      graph.nodes.pop_back();
    }
  }
  // 3. The nodes and their labels in the new order: the casts of blocks first.
  std::vector<Node> nodes;
  std::vector<PipelineNodeLabel> ordered;
  nodes.reserve(graph.nodes.size() + before.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!first[i]) continue;
    nodes.push_back(std::move(graph.nodes[i]));
    ordered.push_back(labels[i]);
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (first[i]) continue;
    if (auto it = before.find(i); it != before.end()) {
      for (auto& [node, label] : it->second) {
        nodes.push_back(std::move(node));
        ordered.push_back(label);
      }
    }
    if (dead[i]) continue;
    nodes.push_back(std::move(graph.nodes[i]));
    ordered.push_back(labels[i]);
  }
  graph.nodes = std::move(nodes);
  labels = std::move(ordered);
  graph.compact();
  return Status::ok();
}

}  // namespace

Expected<ShardedParameterDims> shardParameters(Graph& graph, std::vector<PipelineNodeLabel>& labels, int stage,
                                               int dp_size, int dp_index) {
  CLEAVE_TRY(checkReplicas(dp_size, dp_index));
  // 1. The updates stage 1 made read a block of a trainable parameter: they read the block held
  //    now, and write it (the all-gather of the updated blocks goes).
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<bool> dead(graph.nodes.size(), false), reads_block(graph.nodes.size(), false);
  std::map<ValueId, ValueId> next_value_of;  // the gathered next value -> the updated block
  ShardedParameterDims dims;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& update = graph.nodes[i];
    if (!isOptimizerUpdate(update)) continue;
    const int32_t slice = graph.values[update.operands[0]].producer;
    if (slice < 0 || !isOverDataParallel(graph.nodes[slice], OpId::shard_slice)) continue;
    const int64_t dim = OpContext{opDef(OpId::shard_slice), {}, {}, graph.nodes[slice].attrs}.getInt("dim");
    const ValueId param = graph.nodes[slice].operands[0];
    const Param* held = graph.findParam(param);
    const std::vector<int32_t>& gathered_by = users[update.results[0]];
    if (!held || !held->trainable || gathered_by.size() != 1 || graph.nodes[gathered_by[0]].op != OpId::all_gather ||
        users[graph.nodes[slice].results[0]].size() != 1)
      continue;
    dims.emplace(graph.values[param].name, dim);
    update.operands[0] = param;
    reads_block[i] = true;
    dead[slice] = true;
    dead[gathered_by[0]] = true;
    next_value_of[graph.nodes[gathered_by[0]].results[0]] = update.results[0];
  }
  for (StateUpdate& u : graph.updates)
    if (auto it = next_value_of.find(u.new_value); it != next_value_of.end()) u.new_value = it->second;
  for (ValueId& v : graph.outputs)
    if (next_value_of.count(v)) return Status::internal("parameter sharding: a graph output reads an updated parameter");
  // 2. The blocks, and the gathers for every other reader.
  CLEAVE_TRY(blockAndGather(graph, labels, stage, dims, dp_size, dp_index, dead, reads_block));
  return dims;
}

Status gatherShardedParameters(Graph& graph, std::vector<PipelineNodeLabel>& labels, int stage,
                               const ShardedParameterDims& dims, int dp_size, int dp_index) {
  const std::vector<bool> none(graph.nodes.size(), false);
  return blockAndGather(graph, labels, stage, dims, dp_size, dp_index, none, none);
}

}  // namespace cleave
