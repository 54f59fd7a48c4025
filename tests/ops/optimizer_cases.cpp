// Harness cases of the optimizer family (ir/ops/optimizer_ops.cpp): sgd_update (momentum,
// dampening, weight decay, nesterov; first and later steps) and adamw_update, in f32 and f64, with
// and without a gradient scale operand.
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
    b.add(OpId::adamw_update, dt + " empty parameter",
          {b.uniform(dtype, {0}), b.uniform(dtype, {0}), b.uniform(dtype, {0}), b.uniform(dtype, {0}),
           CaseBuilder::values(DType::kI64, {}, {0})});
  }
  return b.take();
}

}  // namespace cleave::op_harness
