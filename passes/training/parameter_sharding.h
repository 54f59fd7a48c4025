// Parameters sharded over data-parallel replicas (ZeRO stage 3, Rajbhandari et al. 2020; as
// PyTorch's FSDP with FULL_SHARD): each replica holds one block of a parameter, all-gathers the
// whole parameter right before a step of the schedule reads it and frees it after that step's last
// reader, so a stage holds its parameters whole only a few at a time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"
#include "passes/lowering/pipeline_schedule.h"

namespace cleave {

// The parameters ZeRO stage 3 holds in blocks: name -> the dim their blocks split.
using ShardedParameterDims = std::map<std::string, int64_t>;

// Rewrites a training graph after shardOptimizerState (stage 1, and shardGradientSums, stage 2)
// and after its nodes were put in schedule order (`labels`: each node's step, updated here):
// every parameter whose update stage 1 made read this replica's block (a shard_slice over dp) is
// held as that block (full_shape, shard_offset and a dp shard step, as the optimizer state), the
// update reads and writes the block (no all-gather of the updated blocks), and every other reader
// reads the whole parameter all-gathered over dp: one all-gather per parameter per step of the
// schedule that reads it (a microbatch's forward or backward pass; with recomputation, the
// backward pass gathers it again), issued one parameter ahead of its readers (prefetch: the gather
// of a step's next parameter runs while the readers of the one before compute). Returns the sharded
// parameters and their dims, which the rank's other programs (eval) must shard alike. A parameter
// imported with its data keeps this replica's block of the data (so replicas hold programs of their
// own, as tensor-parallel blocks of data do).
// Errors: dp_size < 2, dp_index out of range.
Expected<ShardedParameterDims> shardParameters(Graph& graph, std::vector<PipelineNodeLabel>& labels, int stage,
                                               int dp_size, int dp_index);

// The same for a graph that reads the parameters without updating them (the eval program): the
// parameters named in `dims` are held as blocks and gathered per step before their readers.
Status gatherShardedParameters(Graph& graph, std::vector<PipelineNodeLabel>& labels, int stage,
                               const ShardedParameterDims& dims, int dp_size, int dp_index);

}  // namespace cleave
