// Transposes absorbed by matrix products: matmul and gemm read an operand transposed themselves
// (transpose_a, transpose_b), so a transpose that only swaps its input's last two dims before one
// of them is a copy the product does not need.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// For each operand of a matmul or gemm made by transpose(v) {perm = p}, v of rank r >= 2:
//   - p swaps v's last two dims and nothing else: the product reads v, its flag flipped;
//   - p puts v's last dim second to last (p[r-2] = r-1) and the transpose has no other reader: the
//     transpose keeps the rest of p but leaves the last two dims unswapped, a copy of whole rows
//     instead of element by element, and the product's flag flips (attention's keys as BERT exports
//     them, transposed [0,2,3,1], become [0,2,1,3]).
// A transpose nothing reads any more is left for dce. PyTorch exports a tied LM head as
// matmul(x, transpose(embedding)): a transpose of the whole vocabulary's weights at each inference
// (and at each training step, with its gradient's transpose back). Returns the operands rewritten.
Expected<int> absorbTransposesIntoProducts(Graph& graph);

}  // namespace cleave
