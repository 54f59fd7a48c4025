// RMSNorm recognition: the decomposed RMSNorm of PyTorch's exports becomes one rms_norm op.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Replaces each RMSNorm written as separate ops, as torch.onnx exports Llama's, Qwen2's and T5's
// (both exporters):
//   p = pow(x, 2) (or mul(x, x)); m = reduce_mean(p)[axes=[-1], keepdims=1]; a = add(m, eps);
//   s = sqrt(a); r = div(1, s); n = mul(x, r); y = mul(w, n)
// (either operand order of the adds and muls), by y = rms_norm(x, w)[epsilon=eps], where eps, 2
// and 1 are scalar constants, w is one value per element of x's last dim, x is f32 or f64, and
// p, m, a, s, r and n are read by the next step alone. Its backward is then one rms_norm_grad
// instead of the chain's gradients. The replaced nodes are left for dce. Returns how many.
Expected<int> fuseRmsNorms(Graph& graph);

}  // namespace cleave
