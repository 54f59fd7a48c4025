// Gradients summed over microbatches in blocks (ZeRO stage 2, Rajbhandari et al. 2020; as
// DeepSpeed's stage 2 with gradient accumulation): each microbatch's gradient is reduce-scattered
// over the data-parallel replicas as soon as it exists, and a replica sums only its block.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites a training graph after shardOptimizerState (ZeRO stage 1) whose gradients sum over
// microbatches: where a parameter's gradient is such a sum, add(add(g0, g1), g2)... (from zeros or
// not, each running sum read by the next add alone), and that sum is then reduce-scattered over dp,
// each microbatch's part is reduce-scattered instead, right before it is added, and the sum runs
// over blocks. A stage then holds 1/dp of its gradients between microbatches (the microbatch being
// differentiated stays whole until it is reduce-scattered); the replicas move the gradients once per
// microbatch instead of once per step. A gradient that is not reduce-scattered (read by an output or
// by clipping, or of a parameter no dim of which divides by dp) is left as stage 1 leaves it.
// Meant for graphs of several microbatches: with one, stage 1's reduce-scatter already frees the
// whole gradient as soon as it is summed (and a sum of one microbatch's contributions, as a tied
// weight's, would be scattered part by part for nothing). Returns how many gradients it sharded.
Expected<int> shardGradientSums(Graph& graph);

}  // namespace cleave
