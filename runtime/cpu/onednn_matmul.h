// f32 matmul and gemm through oneDNN's matmul (its AVX-512/AVX2 brgemm kernels, about 10% faster than
// OpenBLAS's sgemm on this project's shapes), and for constant weights (an inference plan's) with the
// weights reordered once into the blocked layout its kernels read (pre-packed), where OpenBLAS packs
// them again at every call.
#pragma once

#include <optional>

#include "runtime/device/kernel.h"

namespace cleave::runtime::cpu {

// Runs an f32 matmul, gemm or fused_matmul call through oneDNN when it is one 2-D product (b is a
// matrix, a's batch dims, untransposed, fold into m; for gemm alpha is 1 and c is absent or a bias
// row added with beta 1; fused_matmul's bias row) or a batch of products over batch dims a, b and
// the result share without broadcasting (a fused_matmul's operands and result read and written in
// place through their permutations' strides); nullopt otherwise (the caller runs OpenBLAS, or
// fused_matmul's steps). The primitive is made once per shape and thread.
// When b is constant (KernelCall::constant_operands) it is packed once per weights tensor and
// thread, and packed again when the call's constants_generation changes.
std::optional<Status> runOneDnnMatmul(const KernelCall& call);

// sgd_matmul_update's product of its f32 matrices a and b (operands 1 and 2) summed into `target`:
// target = scale·op(a)·op(b) + sum_scale·target (the product alone without a scale, and with
// sum_scale 0 the target is not read). nullopt when oneDNN does not take it (the caller runs OpenBLAS).
std::optional<Status> runOneDnnProductInto(const KernelCall& call, float* target, std::optional<float> scale,
                                           float sum_scale);

}  // namespace cleave::runtime::cpu
