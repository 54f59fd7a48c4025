// f32 matmul and gemm with constant weights (an inference plan's) through oneDNN's matmul, the
// weights reordered once into the blocked layout its kernels read (pre-packed) instead of
// OpenBLAS packing them again at every call.
#pragma once

#include <optional>

#include "runtime/device/kernel.h"

namespace cleave::runtime::cpu {

// Runs a matmul or gemm call through oneDNN when its operand 1 is a constant f32 matrix
// (KernelCall::constant_operands), operand 0 is not transposed and, for gemm, alpha is 1 and c is
// absent or a bias row added with beta 1; nullopt otherwise (the caller runs OpenBLAS). The packed
// weights are kept per weights tensor and thread, and packed again when the call's
// constants_generation changes.
std::optional<Status> runOneDnnMatmulWithConstantWeights(const KernelCall& call);

}  // namespace cleave::runtime::cpu
