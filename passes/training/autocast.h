// Mixed precision as torch.autocast(dtype=torch.bfloat16): the GEMM-bound ops in bf16, the rest in f32.
#pragma once

#include <string_view>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The precisions `cleave compile --precision` offers.
enum class Precision { kF32, kBF16 };

// Parses "f32" or "bf16"; anything else is a usage error naming both.
Expected<Precision> parsePrecision(std::string_view name);
// "f32" or "bf16".
std::string_view precisionName(Precision precision);

// Rewrites each matmul, gemm and conv2d whose float operands are all f32 to run on bf16 copies of
// them (cast nodes; a value cast once however many such ops read it) with a bf16 result, cast back
// to f32 under the original result's name: weights stay f32 (the optimizer's master copy), and
// norms, softmax, the loss and the rest run in f32, as under torch.autocast on f32 parameters.
// The backward pass then runs these ops' gradients in bf16 too (autodiff of the casts). The kernels
// accumulate bf16 products in f32. Returns the number of ops rewritten.
Expected<int> autocastToBf16(Graph& graph);

}  // namespace cleave
