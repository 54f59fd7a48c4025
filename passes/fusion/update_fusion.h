// Update fusion: a gradient scaled by a scalar (the clipping coefficient of --clip-grad-norm)
// becomes the optimizer update's gradient scale operand, so the scaled gradient is never written;
// a weight gradient that is one matrix product, updated by SGD, is summed into the weight or its
// momentum buffer by the GEMM itself.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Replaces sgd_update(w, mul(g, s), ...) and adamw_update(w, mul(g, s), ...), s a scalar of w's
// dtype and the product read by the update alone, by the update of g with s as its gradient scale
// (ir/ops/optimizer_ops.h): one pass over the gradient instead of three. `node_group`, when not
// empty, gives each node a group (a pipeline step): the two nodes must share one, and the vector is
// updated to the new node list. Returns how many updates took their scale in.
Expected<int> foldGradientScalesIntoUpdates(Graph& graph, std::vector<int64_t>* node_group = nullptr);

// Replaces sgd_update(w, matmul(a, b), step, [buf]) without weight decay, nesterov or gradient
// scale (or of gemm(a, b) without c, alpha 1: an ONNX Gemm's weight gradient), a and b matrices
// and the product read by the update alone, by sgd_matmul_update(w, a, b, step, [buf]) in the
// product's place (ir/ops/optimizer_ops.h): the GEMM sums the gradient into w (times −lr) or into
// the momentum buffer, so the gradient is never written nor read back. Folds only where every other
// reader of w (and of the buffer) comes before the product, so that the lowering updates them in
// place there. `node_group` as for foldGradientScalesIntoUpdates. Returns how many updates it folded.
Expected<int> foldWeightGradientsIntoUpdates(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
