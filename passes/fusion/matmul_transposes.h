// Transposes folded into matrix products: attention's head transposes ([batch, seq, heads, dim] <->
// [batch, heads, seq, dim]) become how a fused_matmul reads its operands and writes its result.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites, for each transpose of rank >= 3 that keeps the last dim in place (rows stay contiguous):
//   - read only by matmul or fused_matmul nodes (as either operand): each becomes a fused_matmul
//     reading the transpose's input through perm_a / perm_b, and the transpose goes;
//   - of a matmul or fused_matmul result that nothing else reads: the product becomes a fused_matmul
//     writing the transpose's result through perm_result, in the transpose's place.
// Transposes of graph outputs and updated state stay. oneDNN then runs each product in place through
// strides instead of a copy before or after it. `node_group`, when not empty, gives each node a group
// (a pipeline step, as for fuseElementwise): only nodes of one group fold, and it is updated to the
// new node list. Returns the number of transposes folded.
Expected<int> foldTransposesIntoMatmuls(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
