// Harness cases of the fused family (ir/ops/fused_ops.cpp): bodies the fusion pass makes (bias and
// gelu, activation gradients, several results, column sums, layer_norm_grad), every fusable op in one body,
// broadcasting across several dims, literals, scalars, empty tensors and bf16.
#include <cmath>
#include <limits>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {
namespace {

AttrMap body(const std::string& text) { return {{"body", text}}; }

}  // namespace

CaseList fusedCases() {
  CaseBuilder b(110);
  const DType f32 = DType::kF32;
  const auto no_gradient = "fused nodes are made after autodiff";
  b.addWithoutGradient(OpId::fused, "bias, tanh gelu, scale", {b.uniform(f32, {4, 33}), b.uniform(f32, {33})},
                       body("t0 = add(x0, x1); t1 = gelu(t0)[approximate=tanh]; t2 = mul(t1, 0.5); return t2"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "gpt-2 gelu with pow 3",
                       {b.uniform(f32, {2, 3, 130}, -4, 4)},
                       body("t0 = pow(x0, 3); t1 = mul(t0, 0.044715); t2 = add(x0, t1); t3 = mul(t2, 0.7978845608); "
                            "t4 = tanh(t3); t5 = add(t4, 1); t6 = mul(x0, 0.5); t7 = mul(t6, t5); return t7"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "every unary op",
                       {b.uniform(f32, {5, 67}, -3, 3)},
                       body("t0 = exp(x0); t1 = erf(x0); t2 = tanh(t1); t3 = sigmoid(t2); t4 = relu(x0); "
                            "t5 = sqrt(t4); t6 = neg(t5); t7 = clip(t6)[max=1, min=-1.5]; t8 = gelu(t7); "
                            "t9 = div(t8, t0); t10 = sub(t9, t3); t11 = pow(t0, 1.7); t12 = pow(t0, -0.5); "
                            "t13 = add(t11, t12); return t10, t13"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "activation gradients",
                       {b.uniform(f32, {3, 129}), b.uniform(f32, {3, 129}, -3, 3)},
                       body("t0 = gelu_grad(x0, x1); t1 = gelu_grad(x0, x1)[approximate=tanh]; t2 = relu_grad(t0, x1); "
                            "t3 = tanh(x1); t4 = tanh_grad(t1, t3); t5 = sigmoid(x1); t6 = sigmoid_grad(t4, t5); "
                            "t7 = add(t2, t6); return t7, t1"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "broadcast over several dims",
                       {b.uniform(f32, {4, 1, 5}), b.uniform(f32, {3, 1}), b.uniform(f32, {}), b.uniform(f32, {4, 3, 5})},
                       body("t0 = mul(x0, x1); t1 = add(t0, x2); t2 = sub(x3, t1); t3 = exp(t2); return t3, t2"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "a smaller step broadcast to the result",
                       {b.uniform(f32, {7}), b.uniform(f32, {2, 7})},
                       body("t0 = neg(x0); t1 = exp(t0); t2 = mul(t1, x1); return t2"), no_gradient);
  b.addWithoutGradient(OpId::fused, "scalar", {b.uniform(f32, {}), b.uniform(f32, {})},
                       body("t0 = add(x0, x1); t1 = sigmoid(t0); return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "empty", {b.uniform(f32, {0, 5}), b.uniform(f32, {5})},
                       body("t0 = add(x0, x1); t1 = relu(t0); return t1"), no_gradient);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  b.addWithoutGradient(OpId::fused, "special values",
                       {CaseBuilder::values(f32, {8}, {nan, inf, -inf, 0.0, -0.0, 100.0, -100.0, 1e-30})},
                       body("t0 = exp(x0); t1 = tanh(x0); t2 = erf(x0); t3 = relu(x0); t4 = add(t0, t1); "
                            "t5 = sub(t2, t3); return t4, t5"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "bf16", {b.uniform(DType::kBF16, {3, 40}), b.uniform(DType::kBF16, {40})},
                       body("t0 = add(x0, x1); t1 = gelu(t0); t2 = mul(t1, 1.5); return t2, t0"), no_gradient);
  // Attention's scale, mask and softmax along the last axis: masked scores of -1e9, a mask
  // broadcast over batch and heads, the pre-softmax values returned too; rows of one element.
  std::vector<double> mask(64 * 64);
  for (int q = 0; q < 64; ++q)
    for (int k = 0; k < 64; ++k) mask[q * 64 + k] = k > q ? -1e9 : 0.0;
  b.addWithoutGradient(OpId::fused, "attention scale, mask, softmax",
                       {b.uniform(f32, {2, 3, 64, 64}, -4, 4), CaseBuilder::values(f32, {1, 1, 64, 64}, mask)},
                       body("t0 = mul(x0, 0.125); t1 = add(t0, x1); t2 = softmax(t1)[axis=-1]; return t1, t2"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "softmax of a chain, odd rows", {b.uniform(f32, {5, 37}, -3, 3), b.uniform(f32, {37})},
                       body("t0 = sub(x0, x1); t1 = tanh(t0); t2 = softmax(t1)[axis=1]; return t2"), no_gradient);
  b.addWithoutGradient(OpId::fused, "softmax of one-element rows", {b.uniform(f32, {6, 1})},
                       body("t0 = exp(x0); t1 = softmax(t0); return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "softmax of a NaN row", {CaseBuilder::values(f32, {2, 3}, {1, nan, 2, 0.5, 1, 1.5})},
                       body("t0 = neg(x0); t1 = softmax(t0); return t1"), no_gradient);
  // Residual and bias adds ending in a layer norm along the last axis (a transformer's pre-norm):
  // the sum returned too; rows wider than a warp; no bias.
  b.addWithoutGradient(OpId::fused, "residual add, layer norm",
                       {b.uniform(f32, {4, 3, 37}), b.uniform(f32, {4, 3, 37}, -2, 2), b.uniform(f32, {37}, 0.5, 1.5),
                        b.uniform(f32, {37})},
                       body("t0 = add(x0, x1); t1 = layer_norm(t0, x2, x3)[axis=-1, epsilon=1e-05]; return t0, t1"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "bias, layer norm without bias, wide rows",
                       {b.uniform(f32, {5, 300}, -3, 3), b.uniform(f32, {300}), b.uniform(f32, {300})},
                       body("t0 = add(x0, x1); t1 = layer_norm(t0, x2)[epsilon=0.01]; return t1"), no_gradient);
  // A residual add ending in an RMS norm (Llama's pre-norm): the sum returned too; alone; wide rows.
  b.addWithoutGradient(OpId::fused, "residual add, rms norm",
                       {b.uniform(f32, {4, 3, 37}), b.uniform(f32, {4, 3, 37}, -2, 2), b.uniform(f32, {37}, 0.5, 1.5)},
                       body("t0 = add(x0, x1); t1 = rms_norm(t0, x2)[epsilon=1e-06]; return t0, t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "rms norm alone, wide rows", {b.uniform(f32, {5, 300}, -3, 3), b.uniform(f32, {300})},
                       body("t0 = rms_norm(x0, x1)[epsilon=0.01]; return t0"), no_gradient);
  // rms_norm_grad ending a body (dx, and dscale summed over the rows): alone; after the sum of three
  // gradients (Llama's pre-norm backward) over 70 rows, the sum returned too.
  b.addWithoutGradient(OpId::fused, "rms_norm_grad alone",
                       {b.uniform(f32, {6, 37}), b.uniform(f32, {6, 37}, -2, 2), b.uniform(f32, {37}, 0.5, 1.5)},
                       body("t0, t1 = rms_norm_grad(x0, x1, x2)[epsilon=1e-06]; return t0, t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "gradients summed, rms_norm_grad, many rows",
                       {b.uniform(f32, {70, 33}), b.uniform(f32, {70, 33}), b.uniform(f32, {70, 33}),
                        b.uniform(f32, {70, 33}, -3, 3), b.uniform(f32, {33})},
                       body("t0 = add(x0, x1); t1 = add(t0, x2); t2, t3 = rms_norm_grad(t1, x3, x4)[epsilon=0.01]; "
                            "return t1, t2, t3"),
                       no_gradient);
  // Column sums (bias gradients): over two leading dims; two sums over 70 rows (14 blocks of 5 on
  // the CPU); a NaN in one column; no rows (sums of zero).
  b.addWithoutGradient(OpId::fused, "gelu_grad and its column sum",
                       {b.uniform(f32, {3, 5, 67}), b.uniform(f32, {3, 5, 67}, -3, 3)},
                       body("t0 = gelu_grad(x0, x1); t1 = reduce_sum(t0)[axes=[0 1], keepdims=0]; return t0, t1"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "two column sums of many rows", {b.uniform(f32, {70, 33}), b.uniform(f32, {33})},
                       body("t0 = add(x0, x1); t1 = mul(t0, x0); t2 = reduce_sum(t1)[axes=[0], keepdims=0]; "
                            "t3 = reduce_sum(t0)[axes=[-2], keepdims=0]; return t0, t1, t2, t3"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "column sum with a NaN", {CaseBuilder::values(f32, {3, 2}, {1, 2, nan, 3, 4, 5})},
                       body("t0 = neg(x0); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "column sum of no rows", {b.uniform(f32, {0, 5}), b.uniform(f32, {5})},
                       body("t0 = add(x0, x1); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1"), no_gradient);
  // A lone column sum of an operand (a bias gradient no chain computes): over two leading dims; many
  // rows (several blocks on the CPU); a NaN; no rows.
  b.addWithoutGradient(OpId::fused, "lone column sum", {b.uniform(f32, {3, 5, 67})},
                       body("t0 = reduce_sum(x0)[axes=[0 1], keepdims=0]; return t0"), no_gradient);
  b.addWithoutGradient(OpId::fused, "lone column sum of many rows", {b.uniform(f32, {517, 33})},
                       body("t0 = reduce_sum(x0)[axes=[-2], keepdims=0]; return t0"), no_gradient);
  b.addWithoutGradient(OpId::fused, "lone column sum with a NaN", {CaseBuilder::values(f32, {3, 2}, {1, 2, nan, 3, 4, 5})},
                       body("t0 = reduce_sum(x0)[axes=[0], keepdims=0]; return t0"), no_gradient);
  b.addWithoutGradient(OpId::fused, "lone column sum of no rows", {b.uniform(f32, {0, 5})},
                       body("t0 = reduce_sum(x0)[axes=[0], keepdims=0]; return t0"), no_gradient);
  // A total sum ending a chain (gradient clipping's sum of squares): of a matrix over many rows
  // (several blocks on the CPU), of a vector, of a chain broadcasting an operand over two leading
  // dims, of a scalar, with a NaN, of no elements.
  b.addWithoutGradient(OpId::fused, "sum of squares", {b.uniform(f32, {517, 33})},
                       body("t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "sum of squares of a vector", {b.uniform(f32, {1031})},
                       body("t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "total sum of a broadcasting chain", {b.uniform(f32, {3, 5, 67}), b.uniform(f32, {67})},
                       body("t0 = sub(x0, x1); t1 = mul(t0, t0); t2 = mul(t1, 0.5); t3 = reduce_sum(t2)[keepdims=0]; return t3"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "sum of squares of a scalar", {CaseBuilder::values(f32, {}, {-3})},
                       body("t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "sum of squares with a NaN", {CaseBuilder::values(f32, {3, 2}, {1, 2, nan, 3, 4, 5})},
                       body("t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1"), no_gradient);
  b.addWithoutGradient(OpId::fused, "sum of squares of no elements", {b.uniform(f32, {0, 5})},
                       body("t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1"), no_gradient);
  // layer_norm_grad ending a body (dx, and dscale and dbias summed over the rows): alone; after the
  // sum of three gradients (a transformer's pre-norm backward) over 70 rows, the sum returned too;
  // rows over two leading dims, rows of one element.
  b.addWithoutGradient(OpId::fused, "layer_norm_grad alone",
                       {b.uniform(f32, {6, 37}), b.uniform(f32, {6, 37}, -2, 2), b.uniform(f32, {37}, 0.5, 1.5)},
                       body("t0, t1, t2 = layer_norm_grad(x0, x1, x2); return t0, t1, t2"), no_gradient);
  b.addWithoutGradient(OpId::fused, "gradients summed, layer_norm_grad, many rows",
                       {b.uniform(f32, {70, 33}), b.uniform(f32, {70, 33}), b.uniform(f32, {70, 33}),
                        b.uniform(f32, {70, 33}, -3, 3), b.uniform(f32, {33})},
                       body("t0 = add(x0, x1); t1 = add(t0, x2); t2, t3, t4 = layer_norm_grad(t1, x3, x4)[epsilon=0.01]; "
                            "return t1, t2, t3, t4"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "layer_norm_grad over two leading dims",
                       {b.uniform(f32, {2, 5, 40}), b.uniform(f32, {2, 5, 40}), b.uniform(f32, {40})},
                       body("t0 = mul(x0, 0.5); t1, t2, t3 = layer_norm_grad(t0, x1, x2)[axis=2]; return t1, t2, t3"),
                       no_gradient);
  b.addWithoutGradient(OpId::fused, "layer_norm_grad of one-element rows",
                       {b.uniform(f32, {4, 1}), b.uniform(f32, {4, 1}), b.uniform(f32, {1})},
                       body("t0, t1, t2 = layer_norm_grad(x0, x1, x2); return t0, t1, t2"), no_gradient);
  // Perf mode's large cases, beside the unfused ops' "large (perf)" cases of the same shapes.
  const TensorData big = b.uniform(f32, {1024, 1024}, -2, 2), row = b.uniform(f32, {1024}, -2, 2);
  for (const char* text : {"t0 = gelu(x0); return t0", "t0 = exp(x0); return t0", "t0 = add(x0, x1); return t0"}) {
    OpCase& c = b.addWithoutGradient(OpId::fused, std::string("large (perf) ") + text,
                                     text[5] == 'a' ? std::vector<TensorData>{big, row} : std::vector<TensorData>{big},
                                     body(text), no_gradient);
    c.perf = true;
  }
  OpCase& chain = b.addWithoutGradient(OpId::fused, "large (perf) bias, gelu", {big, row},
                                       body("t0 = add(x0, x1); t1 = gelu(t0); return t1"), no_gradient);
  chain.perf = true;
  OpCase& gradient = b.addWithoutGradient(OpId::fused, "large (perf) gelu_grad", {big, big},
                                          body("t0 = gelu_grad(x0, x1); return t0"), no_gradient);
  gradient.perf = true;
  OpCase& bias_gradient = b.addWithoutGradient(OpId::fused, "large (perf) gelu_grad, column sum", {big, big},
                                               body("t0 = gelu_grad(x0, x1); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1"),
                                               no_gradient);
  bias_gradient.perf = true;
  return b.take();
}

}  // namespace cleave::op_harness
