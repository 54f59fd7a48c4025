// Convolution epilogues: a conv2d's bias, residual add and relu computed by the convolution itself.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// In a graph that does not train, rewrites each f32 conv2d with a bias whose result only feeds
//   relu(c)            -> fused_conv2d(x, w, b) {activation = "relu"}
//   add(c, r) (either order, r of c's type), then maybe relu of the sum only
//                      -> fused_conv2d(x, w, b, r) {activation = "none" or "relu"}
// in the last matched node's place, under its result's name (ONNX Runtime's FusedConv; oneDNN runs
// the add and the relu as post-ops while the output is in cache, instead of two more passes over
// memory). A conv2d result that is an output, or read by anything else, stays. Training graphs are
// left as they are (fused_conv2d has no gradient rule). `node_group`, when not empty, gives each
// node a group (a pipeline step, as for fuseElementwise): only nodes of one group fuse, and it is
// updated to the new node list. Returns the number of fused_conv2d nodes made.
Expected<int> fuseConvEpilogues(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
