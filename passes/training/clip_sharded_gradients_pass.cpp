// The clip-sharded-gradients pass: clipping by the global norm after ZeRO sharded the optimizer
// step over dp replicas (see appendShardedGradientClipping in passes/training/gradient_clipping.h).
#include "passes/core/pass_manager.h"
#include "passes/training/gradient_clipping.h"

namespace cleave {
namespace {

Status clip(Graph& graph, const PassOptions& options) {
  return appendShardedGradientClipping(graph, options.getFloat("max_norm"), {}, static_cast<int>(options.getInt("dp")));
}

}  // namespace

PassInfo makeClipShardedGradientsPass() {
  return PassInfo{
      .name = "clip-sharded-gradients",
      .summary = "after shard-optimizer-state: scale the gradient each update reads by min(1, max_norm / (norm + "
                 "1e-6)), the norm over this replica's blocks (whole gradients 1/dp each) all-reduced over dp",
      .options = {{"max_norm", 1.0, "the largest global gradient norm kept"}, {"dp", int64_t{2}, "the data-parallel replicas"}},
      .run = clip,
  };
}

}  // namespace cleave
