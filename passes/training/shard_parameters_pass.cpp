// The shard-parameters pass: parameters held as blocks over dp and all-gathered before the forward
// and the backward pass read them (ZeRO stage 3, see passes/training/parameter_sharding.h).
#include "passes/core/pass_manager.h"
#include "passes/training/parameter_sharding.h"

namespace cleave {
namespace {

Status shard(Graph& graph, const PassOptions& options) {
  // One stage, one microbatch: the steps are the forward and the backward pass. The forward pass is
  // what the outputs but the gradients (which autodiff makes outputs) need.
  std::vector<std::string> outputs;
  for (ValueId v : graph.outputs) outputs.push_back(graph.values[v].name);
  std::erase_if(graph.outputs, [&](ValueId v) { return graph.values[v].name.ends_with(".grad"); });
  std::vector<PipelineNodeLabel> labels = labelPipelineNodes(graph, 0, 1);
  Status status = shardParameters(graph, labels, 0, static_cast<int>(options.getInt("dp")),
                                  static_cast<int>(options.getInt("index")))
                      .status();
  graph.outputs.clear();
  for (const std::string& name : outputs) graph.outputs.push_back(graph.findValue(name));
  return status;
}

}  // namespace

PassInfo makeShardParametersPass() {
  return PassInfo{
      .name = "shard-parameters",
      .summary = "after shard-optimizer-state on a data-parallel replica's graph: parameters whose updates read "
                 "a block hold that block; the forward and the backward pass each all-gather them before use",
      .options = {{"dp", int64_t{2}, "the data-parallel replicas"}, {"index", int64_t{0}, "this replica"}},
      .run = shard,
  };
}

}  // namespace cleave
