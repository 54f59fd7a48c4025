// The shard-gradients pass: gradients summed over microbatches in blocks, each microbatch's part
// reduce-scattered over dp (ZeRO stage 2, see passes/training/gradient_sharding.h).
#include "passes/core/pass_manager.h"
#include "passes/training/gradient_sharding.h"

namespace cleave {

PassInfo makeShardGradientsPass() {
  return PassInfo{
      .name = "shard-gradients",
      .summary = "after shard-optimizer-state on a graph whose gradients sum over microbatches from zeros: each "
                 "microbatch's gradient is reduce-scattered over dp and the sum runs over this replica's blocks",
      .options = {},
      .run = [](Graph& graph, const PassOptions&) { return shardGradientSums(graph).status(); },
  };
}

}  // namespace cleave
