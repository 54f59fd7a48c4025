// GELU's slope computed in the forward pass: the gradient is then one multiply, with no erf, no
// exp and no read of x.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// For each f32 gelu(x) whose gradient gelu_grad(dy, x) (of the same approximation) the graph also
// computes, writes both as the elementwise steps of their formulas (the kernels', op for op), the
// slope computed where the gelu is:
//   exact:    c = 1 + erf(x·√½);  gelu = (x·0.5)·c;
//             slope = c·0.5 + x·(exp((-0.5·x)·x)·(1/√(2π)))   (Φ(x) + x·φ(x))
//   tanh:     t = tanh(β·(x + κ·((x·x)·x)));  gelu = (0.5·x)·(1 + t);
//             slope = 0.5·(1 + t) + (((0.5·x)·(1 − t·t))·β)·(1 + 3κ·(x·x))   (β = √(2/π), κ = 0.044715)
//   backward: dx = dy·slope
// in the two nodes' places, so that elementwise fusion makes one forward node returning x's gelu
// and slope (x itself no longer needed by the backward pass), and a backward node that is a
// multiply (with its bias gradient's column sum). Against the unfused kernels: erf (or tanh) once
// instead of twice, and the forward keeps one f32 tensor per gelu for the backward pass, as the
// unfused plan keeps x. Run before fuseElementwise. The result differs from the two kernels by
// rounding (each step rounds on its own; the tanh gradient kernel groups κ·x³ as (κ·x²)·x).
// `node_group`, when not empty, gives each node a group (a pipeline step); new nodes take the group
// of the gelu, and it is updated to the new node list. Returns the number of gelus rewritten.
Expected<int> computeGeluSlopeInForward(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
