// GELU's Φ(x) computed once: the forward pass keeps it for the gradient, which then evaluates only
// φ(x) (one exp) instead of erf and exp again.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// For each exact f32 gelu(x) whose gradient gelu_grad(dy, x) the graph also computes, writes both as
// the elementwise steps of their formulas (gelu_grad's kernel's, op for op), the forward's Φ(x) read
// by the gradient:
//   forward:  c = 1 + erf(x·√½);  gelu = (x·0.5)·c;  Φ = c·0.5
//   backward: φ = exp((x·-0.5)·x)·(1/√(2π));  dx = dy·(Φ + x·φ)
// in the two nodes' places, so that elementwise fusion makes one forward node returning x's gelu
// and Φ, and a backward node with no erf: about half the gradient's arithmetic, for one more f32
// tensor per gelu kept from the forward to the backward pass. Run before fuseElementwise. The
// result differs from the two kernels by rounding (each step rounds on its own). `node_group`,
// when not empty, gives each node a group (a pipeline step); new nodes take the group of the node
// they replace, and it is updated to the new node list. Returns the number of gelus rewritten.
Expected<int> shareGeluCdfWithGradient(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
