// Gradient buckets: the data-parallel gradient all-reduces of a training graph merged into few large ones.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The default bucket size, as PyTorch DDP's (25 MB).
constexpr int64_t kDefaultBucketBytes = 25 * 1000 * 1000;

// Whether `node` is an `op` node over the data-parallel replicas (its attribute axis is "dp").
bool isOverDataParallel(const Node& node, OpId op);

// Whether `node` sums gradients over the data-parallel replicas: an all-reduce over "dp" with
// reduce "sum" (one gradient, or a bucket of several).
bool isDataParallelGradientSum(const Node& node);

// Merges the single-operand sum all-reduces over "dp" that follow the first node computing a
// gradient (the backward pass) into multi-operand all-reduces of about `bucket_bytes` each.
// Walking in program order, an all-reduce joins the pending bucket right after its operand is
// computed, and the bucket is issued once it holds `bucket_bytes` (or before a node that reads one
// of its results, or at the end), so communication starts as soon as a bucket's gradients exist and
// overlaps the rest of the backward pass, as PyTorch DDP's buckets.
Status bucketGradientAllReduces(Graph& graph, int64_t bucket_bytes = kDefaultBucketBytes);

}  // namespace cleave
