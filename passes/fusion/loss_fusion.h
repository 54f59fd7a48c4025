// Loss fusion: a softmax cross-entropy and its gradient become one node that reads the logits once.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Replaces softmax_cross_entropy(logits, labels) and softmax_cross_entropy_grad(dloss, logits,
// labels) of the same logits, labels and ignore_index by softmax_cross_entropy_and_grad(logits,
// labels, dloss) at the gradient's place, when no node reads the loss before it (a graph output
// may). `node_group`, when not empty, gives each node a group (a pipeline step): only two nodes of
// one group fuse, and the vector is updated to the new node list. Returns how many pairs fused.
Expected<int> fuseLossWithGradient(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
