// Optimizer state sharded over data-parallel replicas (ZeRO stage 1, Rajbhandari et al. 2020; as
// PyTorch's ZeroRedundancyOptimizer over DDP): each replica keeps and updates one block of every
// parameter's optimizer state, then the replicas all-gather the updated parameter.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// What shardOptimizerState did.
struct OptimizerShardingReport {
  int sharded = 0;   // parameters whose update runs on a block
  int whole = 0;     // parameters updated whole (dim 0 does not divide by the replicas, or a scalar)
};

// Rewrites the optimizer step of one data-parallel replica's training graph (replica `dp_index` of
// `dp_size`, whose gradients are already summed over the replicas): the update of a parameter P
// whose dim 0 divides by dp_size reads this replica's block of rows of P and of its gradient
// (shard_slice over axis "dp"), its optimizer state holds only that block (full_shape and
// shard_offset say where it sits in the whole state, so checkpoints hold whole tensors), and the
// updated blocks are all-gathered into P's next value. The numbers are those of the unsharded
// step; the state takes 1/dp_size of the memory, for one all-gather of the parameters per step.
// Errors: dp_size < 2, an index out of range.
Expected<OptimizerShardingReport> shardOptimizerState(Graph& graph, int dp_size, int dp_index);

}  // namespace cleave
