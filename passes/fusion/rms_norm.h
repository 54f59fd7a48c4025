// RMSNorm recognition: the decomposed RMSNorm of PyTorch's exports becomes one rms_norm op.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Replaces each RMSNorm written as separate ops, as torch.onnx exports Llama's, Qwen2's and T5's
// (both exporters) and torch.nn.RMSNorm's:
//   p = pow(x, 2) (or mul(x, x)); m = reduce_mean(p)[axes = the last k dims, keepdims=1];
//   a = add(m, eps); n = mul(x, div(1, sqrt(a))) (or mul(x, pow(a, -0.5)), or div(x, sqrt(a)));
//   y = mul(w, n)
// (either operand order of the adds and muls), by y = rms_norm(x, w)[axis=-k, epsilon=eps], where
// eps, 2, -0.5 and 1 are scalar constants, w has the shape of x's last k dims, x is f32 or f64, and
// each step but y is read by the next step alone. Without a weight mul after it (a norm without a
// weight, or a mul by anything else) n itself becomes rms_norm(x, ones), the constant of ones put
// in front of it. Its backward is then one rms_norm_grad instead of the chain's gradients. The
// replaced nodes are left for dce. Returns how many norms it replaced.
Expected<int> fuseRmsNorms(Graph& graph);

}  // namespace cleave
