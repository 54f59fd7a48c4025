// Optimizer state sharded over data-parallel replicas (ZeRO stage 1, Rajbhandari et al. 2020; as
// PyTorch's ZeroRedundancyOptimizer over DDP): each replica keeps and updates one block of every
// parameter's optimizer state, then the replicas all-gather the updated parameter.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites the optimizer step of one data-parallel replica's training graph (replica `dp_index` of
// `dp_size`, its gradients summed over the replicas by all-reduces over axis "dp"): the update of a
// parameter P with a dim that divides by dp_size (the first such) reads this replica's block of P
// along it (shard_slice) and of P's summed gradient, its optimizer state holds only that block
// (full_shape and shard_offset say where it sits in the whole state, so checkpoints hold whole
// tensors), and the updated blocks are all-gathered into P's next value. A gradient the update
// alone reads leaves its all-reduce and is reduce-scattered instead (no output, no clipping read
// it), so a step moves what the all-reduce moved. The numbers are those of the unsharded step; the
// state takes 1/dp_size of the memory. A parameter with no such dim (a scalar) is updated whole.
// Errors: dp_size < 2, an index out of range.
Status shardOptimizerState(Graph& graph, int dp_size, int dp_index);

// Makes `param` (of `graph`) hold block `dp_index` of `dp_size` along `dim` (which must divide by
// dp_size) of the tensor it held: its type, its block's start in the whole tensor, and the shard
// step that derives that start from a replica's index.
void holdDataParallelBlock(Graph& graph, Param& param, int64_t dim, int dp_size, int dp_index);

}  // namespace cleave
