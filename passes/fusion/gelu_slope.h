// GELU's slope computed in the forward pass: the gradient is then one multiply, with no erf, no
// exp and no read of x.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// For each exact f32 gelu(x) whose gradient gelu_grad(dy, x) the graph also computes, writes both as
// the elementwise steps of their formulas (gelu_grad's kernel's, op for op), the slope computed
// where the gelu is:
//   forward:  c = 1 + erf(x·√½);  gelu = (x·0.5)·c;
//             slope = c·0.5 + x·(exp((-0.5·x)·x)·(1/√(2π)))   (Φ(x) + x·φ(x), GELU's derivative)
//   backward: dx = dy·slope
// in the two nodes' places, so that elementwise fusion makes one forward node returning x's gelu
// and slope (x itself no longer needed by the backward pass), and a backward node that is a
// multiply (with its bias gradient's column sum). Against the unfused kernels: erf once instead of
// twice, and the forward keeps one f32 tensor per gelu for the backward pass, as the unfused plan
// keeps x. Run before fuseElementwise. The result differs from the two kernels by rounding (each
// step rounds on its own). `node_group`, when not empty, gives each node a group (a pipeline step);
// new nodes take the group of the gelu, and it is updated to the new node list. Returns the number
// of gelus rewritten.
Expected<int> computeGeluSlopeInForward(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
