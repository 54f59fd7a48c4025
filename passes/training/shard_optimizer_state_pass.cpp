// The shard-optimizer-state pass: one data-parallel replica's optimizer step on blocks of rows
// (ZeRO stage 1, see passes/training/optimizer_sharding.h).
#include "passes/core/pass_manager.h"
#include "passes/training/optimizer_sharding.h"

namespace cleave {
namespace {

Status shard(Graph& graph, const PassOptions& options) {
  return shardOptimizerState(graph, static_cast<int>(options.getInt("dp")), static_cast<int>(options.getInt("index")));
}

}  // namespace

PassInfo makeShardOptimizerStatePass() {
  return PassInfo{
      .name = "shard-optimizer-state",
      .summary = "after add-optimizer on a data-parallel replica's graph: each update reads this replica's block "
                 "of rows (shard_slice over dp), its state holds that block, and the updated blocks are all-gathered",
      .options = {{"dp", int64_t{2}, "the data-parallel replicas"}, {"index", int64_t{0}, "this replica"}},
      .run = shard,
  };
}

}  // namespace cleave
