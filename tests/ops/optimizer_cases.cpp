// Harness cases of the optimizer family (ir/ops/optimizer_ops.cpp): sgd_update (momentum,
// dampening, weight decay, nesterov; first and later steps) and adamw_update, in f32 and f64, with
// and without a gradient scale operand; sgd_matmul_update (the weight gradient's product summed into the
// parameter or its momentum buffer) with each transpose, a schedule and an empty product.
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList optimizerCases() {
  CaseBuilder b(108);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string dt(dtypeName(dtype));
    const Shape shape = {1031};
    const TensorData w = b.uniform(dtype, shape), g = b.uniform(dtype, shape), buffer = b.uniform(dtype, shape);
    const TensorData m = b.uniform(dtype, shape), v = b.uniform(dtype, shape, 0, 1);
    const TensorData scale = CaseBuilder::values(dtype, {}, {0.37});  // a clipping coefficient
    for (int64_t taken : {0, 3}) {
      const std::string label = dt + " step " + std::to_string(taken);
      const TensorData step = CaseBuilder::values(DType::kI64, {}, {static_cast<double>(taken)});
      b.add(OpId::sgd_update, label, {w, g, step}, {{"lr", 0.1}});
      b.add(OpId::sgd_update, label + " weight decay", {w, g, step}, {{"lr", 0.1}, {"weight_decay", 0.01}});
      b.add(OpId::sgd_update, label + " momentum, dampening", {w, g, step, buffer},
            {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.001}});
      b.add(OpId::sgd_update, label + " nesterov", {w, g, step, buffer}, {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", int64_t{1}}});
      b.add(OpId::sgd_update, label + " gradient scale", {w, g, step, scale}, {{"lr", 0.1}, {"weight_decay", 0.01}});
      b.add(OpId::sgd_update, label + " momentum, gradient scale", {w, g, step, buffer, scale},
            {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}});
      const std::optional<Tolerance> adamw =
          dtype == DType::kF32 ? std::optional<Tolerance>(Tolerance{2e-6, 1e-7}) : std::nullopt;
      OpCase& defaults = b.add(OpId::adamw_update, label + " defaults", {w, g, m, v, step});
      defaults.tolerance = defaults.device_tolerance = adamw;
      OpCase& decayed = b.add(OpId::adamw_update, label, {w, g, m, v, step}, {{"lr", 0.01}, {"weight_decay", 0.1}});
      decayed.tolerance = decayed.device_tolerance = adamw;
      OpCase& scaled = b.add(OpId::adamw_update, label + " gradient scale", {w, g, m, v, step, scale}, {{"lr", 0.01}});
      scaled.tolerance = scaled.device_tolerance = adamw;
    }
    // sgd_matmul_update: w [37, 53] updated by the product of a and b (k = 61), as sgd_update.
    const TensorData w2 = b.uniform(dtype, {37, 53}), buffer2 = b.uniform(dtype, {37, 53});
    const TensorData a = b.uniform(dtype, {37, 61}), a_t = b.uniform(dtype, {61, 37});
    const TensorData b_ = b.uniform(dtype, {61, 53}), b_t = b.uniform(dtype, {53, 61});
    for (int64_t taken : {0, 3}) {
      const std::string label = dt + " step " + std::to_string(taken);
      const TensorData step = CaseBuilder::values(DType::kI64, {}, {static_cast<double>(taken)});
      b.add(OpId::sgd_matmul_update, label, {w2, a, b_, step}, {{"lr", 0.1}});
      b.add(OpId::sgd_matmul_update, label + " transpose_a (a weight gradient)", {w2, a_t, b_, step},
            {{"lr", 0.1}, {"transpose_a", int64_t{1}}});
      b.add(OpId::sgd_matmul_update, label + " momentum", {w2, a_t, b_, step, buffer2},
            {{"lr", 0.05}, {"momentum", 0.9}, {"transpose_a", int64_t{1}}});
      b.add(OpId::sgd_matmul_update, label + " momentum, dampening, transpose_b", {w2, a, b_t, step, buffer2},
            {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}, {"transpose_b", int64_t{1}}});
      b.add(OpId::sgd_matmul_update, label + " both transposed, cosine schedule", {w2, a_t, b_t, step},
            {{"lr", 0.1}, {"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}, {"lr_decay", std::string("cosine")},
             {"total_steps", int64_t{5}}, {"warmup", int64_t{1}}});
      // An empty product (k = 0): a zero gradient.
      const TensorData a_empty = b.uniform(dtype, {37, 0}), b_empty = b.uniform(dtype, {0, 53});
      b.add(OpId::sgd_matmul_update, label + " momentum, k = 0", {w2, a_empty, b_empty, step, buffer2},
            {{"lr", 0.05}, {"momentum", 0.9}});
    }
    b.add(OpId::adamw_update, dt + " empty parameter",
          {b.uniform(dtype, {0}), b.uniform(dtype, {0}), b.uniform(dtype, {0}), b.uniform(dtype, {0}),
           CaseBuilder::values(DType::kI64, {}, {0})});
  }
  return b.take();
}

}  // namespace cleave::op_harness
