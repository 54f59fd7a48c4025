// GELU recognition: the decomposed GELU of PyTorch's exports becomes one gelu op.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Replaces each GELU written as separate ops, as torch.onnx exports it below opset 20 (nn.GELU and
// F.gelu in BERT, ViT, ConvNeXt and Whisper; Hugging Face's gelu_new in GPT-2 and T5), by one gelu:
//   exact: e = erf(x / √2) (or erf(x · 1/√2)); p = e + 1;         y = x · 0.5 · p
//   tanh:  t = tanh(β · (x + κ · x³)) (x³ as pow(x, 3) or x·x·x), or tanh((x · β) · (1 + κ · x · x))
//          (Hugging Face's FastGELUActivation, BLOOM's gelu); p = t + 1;  y = x · 0.5 · p
// with β = √(2/π) and κ = 0.044715 (at f32 precision), y's three factors multiplied in any order
// and grouping, each add and mul with its operands in either order, x f32 or f64, the constants
// scalar constants, and each step but y read by the next step alone. y becomes gelu(x) (with
// approximate = "tanh" for the tanh form); the chain before it is left for dce. Its backward is
// then one gelu_grad, which the fusion pass turns into a multiply by the slope the forward's fused
// node computes (passes/fusion/gelu_slope.h), instead of the chain's gradients reading the 3 or 4
// intermediates the forward had to keep. Returns how many GELUs it replaced.
Expected<int> fuseGelus(Graph& graph);

}  // namespace cleave
