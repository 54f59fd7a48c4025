// Gradient buckets: the data-parallel gradient all-reduces of a training graph merged into few large ones.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The default bucket size, as PyTorch DDP's (25 MB).
constexpr int64_t kDefaultBucketBytes = 25 * 1000 * 1000;

// Merges the single-operand sum all-reduces over "dp" that follow the first node computing a
// gradient (the backward pass) into multi-operand all-reduces of at most `bucket_bytes` each
// (a single larger tensor gets a bucket of its own). Walking in program order, a bucket is issued
// as soon as it is full, or just before the first node that reads one of its results, so each
// all-reduce starts as early as its gradients exist and overlaps the rest of the backward pass.
Status bucketGradientAllReduces(Graph& graph, int64_t bucket_bytes = kDefaultBucketBytes);

}  // namespace cleave
