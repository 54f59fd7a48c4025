// Work folded into matrix products (fused_matmul): a bias add that the fused elementwise chains would
// not take becomes the product's bias row, and attention's head transposes ([batch, seq, heads, dim]
// <-> [batch, heads, seq, dim]) become how it reads its operands and writes its result.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites
//   - add(p, bias) (either order) of a matmul or fused_matmul result p that only the add reads, with
//     bias of shape [n] (one value per column of p; its dtype), when no reader of the sum is a
//     fusable elementwise op (those take the add into their fused node instead): the product becomes
//     a fused_matmul with the bias as operand 2, in the add's place (a linear layer's bias before a
//     reshape, as attention's q, k and v projections);
// then, for each transpose of rank >= 3 that keeps the last dim in place (rows stay contiguous):
//   - read only by matmul or fused_matmul nodes (as either operand): each becomes a fused_matmul
//     reading the transpose's input through perm_a / perm_b, and the transpose goes;
//   - of a matmul or fused_matmul result that nothing else reads: the product becomes a fused_matmul
//     writing the transpose's result through perm_result, in the transpose's place.
// Values that are graph outputs or updated state keep their producers. oneDNN then runs each product
// in place through strides, the bias added in its epilogue, instead of a pass before or after it. `node_group`, when not empty, gives each node a group
// (a pipeline step, as for fuseElementwise): only nodes of one group fold, and it is updated to the
// new node list. Returns the number of adds and transposes folded.
Expected<int> fuseIntoMatmuls(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
