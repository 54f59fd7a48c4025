// Chains of views (reshapes, squeezes, unsqueezes, transposes) written as at most one reshape, one
// transpose and one reshape, so that the partitioner sees where a split dim goes. PyTorch's
// nn.MultiheadAttention (torchvision's ViT, OpenCLIP) exports q as [S, B, E] -> reshape [S, B·H, D]
// -> transpose [B·H, S, D] -> reshape [B, H, S, D]: the middle form merges the batch with the
// heads, and a split of the heads cannot survive it, so tensor parallelism gathered them. The
// same chain is reshape [S, B, H, D] -> transpose [B, H, S, D], which keeps them split.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites each chain of two or more views (each result read by the next view alone, not read
// after the nodes; the first view's operand not a parameter) as
//   reshape(x, atoms) -> transpose(perm) -> reshape(result shape)
// (each step left out where it changes nothing) when that is fewer nodes. The atoms are the
// finest dims both ends and every step of the chain can be written in: each dim of each value a
// run of consecutive atoms. The last node writes the chain's result (its value and name). The
// same elements in the same places: views only move them. Returns the chains rewritten.
Expected<int> canonicalizeViewChains(Graph& graph);

}  // namespace cleave
