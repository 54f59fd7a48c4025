// Tests of the CPU kernels of the gradient ops against central finite differences of their forward
// ops (in f64), and of the optimizer ops against PyTorch's update formulas and values.
#include <cmath>
#include <cstring>
#include <random>

#include "tests/unit/cpu_kernel_test_support.h"

namespace cleave::runtime::kernel_test {
namespace {

using Ints = std::vector<int64_t>;

// The first result of op on operands, for finite differences.
HostTensor forward(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& a) {
  auto out = run(op, operands, a);
  return out.empty() ? HostTensor() : std::move(out[0]);
}

std::vector<double> randomWeights(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> w(static_cast<size_t>(count));
  for (double& v : w) v = dist(rng);
  return w;
}

HostTensor asTensor(const std::vector<double>& values, const Shape& shape) {
  return makeTensor(DType::kF64, shape, values);
}

// Tolerance of a gradient against central differences with step 1e-6 in f64.
constexpr double kGradientTolerance = 1e-6;

// ---- Elementwise gradients ----

TEST(CpuKernelsGradient, ActivationGradientsMatchFiniteDifferences) {
  std::mt19937 rng(31);
  const Shape shape = {5, 7};
  HostTensor x = randomTensor(DType::kF64, shape, rng, -2, 2);
  for (int64_t i = 0; i < x.numel(); ++i)  // keep relu's kink out of the difference steps
    if (std::abs(x.at(i)) < 0.05) x.set(i, 0.5);
  const std::vector<double> weights = randomWeights(x.numel(), rng);
  const HostTensor dy = asTensor(weights, shape);
  struct Case {
    OpId forward_op, grad_op;
    AttrMap attributes;
    bool takes_result;  // the gradient op reads the forward result y rather than x
  };
  const std::vector<Case> cases = {
      {OpId::relu, OpId::relu_grad, {}, false},
      {OpId::gelu, OpId::gelu_grad, {}, false},
      {OpId::gelu, OpId::gelu_grad, {{"approximate", std::string("tanh")}}, false},
      {OpId::tanh, OpId::tanh_grad, {}, true},
      {OpId::sigmoid, OpId::sigmoid_grad, {}, true},
  };
  for (const Case& c : cases) {
    const HostTensor y = forward(c.forward_op, {&x}, c.attributes);
    const auto dx = run(c.grad_op, {&dy, c.takes_result ? &y : &x}, c.attributes);
    const auto expected =
        finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(c.forward_op, {&at}, c.attributes); });
    expectClose(dx[0], expected, kGradientTolerance, kGradientTolerance, std::string(opName(c.grad_op)));
  }
}

TEST(CpuKernelsGradient, ActivationGradientsInFloat32AndInPlace) {
  std::mt19937 rng(32);
  const HostTensor x = randomTensor(DType::kF32, {33}, rng, -2, 2);
  const HostTensor dy = randomTensor(DType::kF32, {33}, rng);
  const HostTensor y = forward(OpId::tanh, {&x}, {});
  const auto dx = run(OpId::tanh_grad, {&dy, &y});
  std::vector<double> expected;
  for (int64_t i = 0; i < 33; ++i) expected.push_back(dy.at(i) * (1 - y.at(i) * y.at(i)));
  expectClose(dx[0], expected, 1e-6, 1e-7, "tanh_grad f32");
  // The result may share memory with dy.
  HostTensor shared = dy;
  const std::vector<TensorType> types = {dy.type, y.type};
  const std::vector<TensorType> result_types = {dy.type};
  const AttrMap none;
  const void* inputs[] = {shared.bytes(), y.bytes()};
  void* outputs[] = {shared.bytes()};
  KernelCall call{OpContext{opDef(OpId::tanh_grad), types, result_types, none}, inputs, outputs, 2};
  ASSERT_TRUE(findCpuKernel(OpId::tanh_grad)(call).isOk());
  expectClose(shared, dx[0].values(), 0, 0, "tanh_grad in place");
}

// ---- softmax_grad, log_softmax_grad ----

TEST(CpuKernelsGradient, SoftmaxGradientsMatchFiniteDifferences) {
  std::mt19937 rng(33);
  const Shape shape = {3, 4, 5};
  const HostTensor x = randomTensor(DType::kF64, shape, rng, -3, 3);
  const std::vector<double> weights = randomWeights(x.numel(), rng);
  const HostTensor dy = asTensor(weights, shape);
  for (int64_t axis : {-1, 1, 0}) {
    for (bool log : {false, true}) {
      const OpId op = log ? OpId::log_softmax : OpId::softmax;
      const AttrMap a = {{"axis", axis}};
      const HostTensor y = forward(op, {&x}, a);
      const auto dx = run(log ? OpId::log_softmax_grad : OpId::softmax_grad, {&dy, &y}, a);
      const auto expected = finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(op, {&at}, a); });
      expectClose(dx[0], expected, kGradientTolerance, kGradientTolerance,
                  std::string(opName(op)) + "_grad axis " + std::to_string(axis));
    }
  }
}

// ---- layer_norm_grad ----

TEST(CpuKernelsGradient, LayerNormGradientsMatchFiniteDifferences) {
  std::mt19937 rng(34);
  const Shape shape = {3, 4, 6};
  const HostTensor x = randomTensor(DType::kF64, shape, rng, -2, 2);
  const std::vector<double> weights = randomWeights(x.numel(), rng);
  const HostTensor dy = asTensor(weights, shape);
  for (int64_t axis : {-1, 1}) {
    const Shape normalized(shape.begin() + (axis + 3) % 3, shape.end());
    const HostTensor scale = randomTensor(DType::kF64, normalized, rng), bias = randomTensor(DType::kF64, normalized, rng);
    const AttrMap a = {{"axis", axis}, {"epsilon", 1e-2}};
    const auto grads = run(OpId::layer_norm_grad, {&dy, &x, &scale}, a);
    ASSERT_EQ(grads.size(), 3u);
    const std::string what = "layer_norm_grad axis " + std::to_string(axis);
    expectClose(grads[0],
                finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(OpId::layer_norm, {&at, &scale, &bias}, a); }),
                kGradientTolerance, kGradientTolerance, what + " dx");
    expectClose(grads[1],
                finiteDifferenceGradient(scale, weights, [&](const HostTensor& at) { return forward(OpId::layer_norm, {&x, &at, &bias}, a); }),
                kGradientTolerance, kGradientTolerance, what + " dscale");
    expectClose(grads[2],
                finiteDifferenceGradient(bias, weights, [&](const HostTensor& at) { return forward(OpId::layer_norm, {&x, &scale, &at}, a); }),
                kGradientTolerance, kGradientTolerance, what + " dbias");
  }
}

// ---- Convolution gradients ----

struct ConvCase {
  Shape x, w;
  Ints strides, pads, dilations;
  int64_t groups;
};

const std::vector<ConvCase>& convCases() {
  static const std::vector<ConvCase> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 2}, 1},  // strides, asymmetric pads, dilation
      {{2, 4, 6, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},  // groups
      {{2, 3, 6, 6}, {3, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 3},  // depthwise
      {{1, 2, 5, 6}, {4, 1, 2, 3}, {1, 2}, {0, 1, 1, 0}, {2, 1}, 2},  // depthwise with a channel multiplier
      {{2, 1, 6, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},  // one input channel
      {{2, 4, 3, 4}, {6, 2, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2},  // grouped 1x1
      {{2, 3, 5, 5}, {2, 3, 1, 1}, {2, 2}, {1, 0, 0, 1}, {1, 1}, 1},  // 1x1 with stride and padding
      {{2, 3, 6, 7}, {9, 3, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1},  // width-keeping with dilation
      {{1, 2, 5, 6}, {9, 2, 4, 4}, {1, 1}, {2, 1, 1, 2}, {1, 1}, 1},  // width-keeping, even kernel
      {{2, 2, 4, 3}, {8, 2, 1, 7}, {1, 1}, {0, 3, 0, 3}, {1, 1}, 1},  // kernel wider than the image
      {{2, 4, 1, 1}, {3, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},  // 1x1 image, padded 3x3 (ResNet's last stage)
  };
  return cases;
}

AttrMap convAttrs(const ConvCase& c) {
  return {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"groups", c.groups}};
}

TEST(CpuKernelsGradient, ConvGradientsMatchFiniteDifferences) {
  std::mt19937 rng(35);
  for (const ConvCase& c : convCases()) {
    const HostTensor x = randomTensor(DType::kF64, c.x, rng), w = randomTensor(DType::kF64, c.w, rng);
    const AttrMap a = convAttrs(c);
    const HostTensor y = forward(OpId::conv2d, {&x, &w}, a);
    const std::vector<double> weights = randomWeights(y.numel(), rng);
    const HostTensor dy = asTensor(weights, y.type.shape);
    AttrMap input_attrs = a, weight_attrs = a;
    input_attrs["input_shape"] = c.x;
    weight_attrs["weight_shape"] = c.w;
    const std::string what = "conv x " + shapeStr(c.x) + " w " + shapeStr(c.w);
    expectClose(run(OpId::conv2d_grad_input, {&dy, &w}, input_attrs)[0],
                finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(OpId::conv2d, {&at, &w}, a); }),
                kGradientTolerance, kGradientTolerance, what + " grad_input");
    expectClose(run(OpId::conv2d_grad_weight, {&dy, &x}, weight_attrs)[0],
                finiteDifferenceGradient(w, weights, [&](const HostTensor& at) { return forward(OpId::conv2d, {&x, &at}, a); }),
                kGradientTolerance, kGradientTolerance, what + " grad_weight");
  }
}

// For inputs too large for finite differences (one image per im2col block, and the parallel
// paths), the gradients must be conv2d's adjoints: <conv(x, w), dy> = <x, dx> = <w, dw>.
TEST(CpuKernelsGradient, ConvGradientsAreAdjointsOnLargeInputs) {
  std::mt19937 rng(36);
  const std::vector<ConvCase> cases = {
      {{2, 16, 32, 32}, {4, 16, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1},
      {{8, 8, 14, 14}, {16, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{8, 16, 14, 14}, {16, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 16},
  };
  for (const ConvCase& c : cases) {
    const HostTensor x = randomTensor(DType::kF64, c.x, rng), w = randomTensor(DType::kF64, c.w, rng);
    const AttrMap a = convAttrs(c);
    const HostTensor y = forward(OpId::conv2d, {&x, &w}, a);
    const HostTensor dy = randomTensor(DType::kF64, y.type.shape, rng);
    AttrMap input_attrs = a, weight_attrs = a;
    input_attrs["input_shape"] = c.x;
    weight_attrs["weight_shape"] = c.w;
    const auto dx = run(OpId::conv2d_grad_input, {&dy, &w}, input_attrs, 4);
    const auto dw = run(OpId::conv2d_grad_weight, {&dy, &x}, weight_attrs, 4);
    auto dot = [](const HostTensor& p, const HostTensor& q) {
      double sum = 0;
      for (int64_t i = 0; i < p.numel(); ++i) sum += p.at(i) * q.at(i);
      return sum;
    };
    const double y_dy = dot(y, dy);
    EXPECT_NEAR(dot(x, dx[0]), y_dy, 1e-9 * std::abs(y_dy) + 1e-9) << "grad_input of " << shapeStr(c.x);
    EXPECT_NEAR(dot(w, dw[0]), y_dy, 1e-9 * std::abs(y_dy) + 1e-9) << "grad_weight of " << shapeStr(c.x);
    // One thread splits the GEMMs differently from four: equal up to rounding.
    expectClose(run(OpId::conv2d_grad_input, {&dy, &w}, input_attrs, 1)[0], dx[0].values(), 1e-12, 1e-12,
                "conv2d_grad_input on one thread");
    expectClose(run(OpId::conv2d_grad_weight, {&dy, &x}, weight_attrs, 1)[0], dw[0].values(), 1e-12, 1e-12,
                "conv2d_grad_weight on one thread");
  }
}

// ---- Pool gradients ----

TEST(CpuKernelsGradient, PoolGradientsMatchFiniteDifferences) {
  std::mt19937 rng(37);
  struct PoolCase {
    Shape input;
    Ints kernel, strides, pads;
    int64_t ceil_mode;
  };
  const std::vector<PoolCase> cases = {
      {{2, 2, 6, 6}, {2, 2}, {}, {0, 0, 0, 0}, 0},
      {{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},
      {{2, 1, 6, 7}, {3, 2}, {2, 3}, {1, 0, 0, 1}, 1},
      {{1, 1, 5, 5}, {2, 3}, {1, 1}, {1, 1, 0, 1}, 0},  // overlapping windows
  };
  for (const PoolCase& c : cases) {
    const HostTensor x = randomTensor(DType::kF64, c.input, rng);
    for (int64_t count_include_pad : {0, 1}) {
      AttrMap a = {{"kernel", c.kernel}, {"pads", c.pads}, {"ceil_mode", c.ceil_mode}, {"count_include_pad", count_include_pad}};
      if (!c.strides.empty()) a["strides"] = c.strides;
      const HostTensor y = forward(OpId::max_pool2d, {&x}, a);
      const std::vector<double> weights = randomWeights(y.numel(), rng);
      const HostTensor dy = asTensor(weights, y.type.shape);
      AttrMap max_attrs = a;
      max_attrs.erase("count_include_pad");
      expectClose(run(OpId::max_pool2d_grad, {&dy, &x}, max_attrs)[0],
                  finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(OpId::max_pool2d, {&at}, a); }),
                  kGradientTolerance, kGradientTolerance, "max_pool2d_grad " + shapeStr(c.input));
      AttrMap avg_attrs = a;
      avg_attrs["input_shape"] = c.input;
      expectClose(run(OpId::avg_pool2d_grad, {&dy}, avg_attrs)[0],
                  finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(OpId::avg_pool2d, {&at}, a); }),
                  kGradientTolerance, kGradientTolerance, "avg_pool2d_grad " + shapeStr(c.input));
    }
  }
}

TEST(CpuKernelsGradient, MaxPoolGradientGoesToTheFirstMaximum) {
  const HostTensor x = makeTensor(DType::kF32, {1, 1, 2, 4}, {3, 7, 7, 1, 7, 2, 5, 5});
  const HostTensor dy = makeTensor(DType::kF32, {1, 1, 1, 2}, {10, 20});
  const auto dx = run(OpId::max_pool2d_grad, {&dy, &x}, {{"kernel", Ints{2, 2}}});
  expectClose(dx[0], {0, 10, 20, 0, 0, 0, 0, 0}, 0, 0, "ties");
}

// ---- gather_grad, slice_grad ----

TEST(CpuKernelsGradient, GatherGradientScatterAddsRepeatedIndices) {
  std::mt19937 rng(38);
  const Shape data_shape = {4, 5, 3};
  const HostTensor data = randomTensor(DType::kF64, data_shape, rng);
  for (DType index_type : {DType::kI64, DType::kI32}) {
    // Repeated and negative indices, along each axis (sizes 4, 5, 3).
    const std::vector<std::pair<int64_t, HostTensor>> cases = {
        {1, makeTensor(index_type, {2, 3}, {1, -1, 1, 0, 4, 1})},
        {-3, makeTensor(index_type, {2, 2}, {0, -1, 3, 0})},
        {2, makeTensor(index_type, {3}, {2, 2, -3})},
    };
    for (const auto& axis_and_indices : cases) {
      const int64_t axis = axis_and_indices.first;
      const HostTensor& indices = axis_and_indices.second;  // (clang 14 cannot capture structured bindings)
      const AttrMap a = {{"axis", axis}};
      const HostTensor y = forward(OpId::gather, {&data, &indices}, a);
      const std::vector<double> weights = randomWeights(y.numel(), rng);
      const HostTensor dy = asTensor(weights, y.type.shape);
      AttrMap grad_attrs = a;
      grad_attrs["data_shape"] = data_shape;
      expectClose(run(OpId::gather_grad, {&dy, &indices}, grad_attrs)[0],
                  finiteDifferenceGradient(data, weights, [&](const HostTensor& at) { return forward(OpId::gather, {&at, &indices}, a); }),
                  kGradientTolerance, kGradientTolerance, "gather_grad axis " + std::to_string(axis) + " " + indices.type.str());
    }
  }
}

TEST(CpuKernelsGradient, GatherGradientErrorsAndEmbeddingScaleParallelism) {
  const HostTensor dy(TensorType{DType::kF32, {2, 3}});
  const HostTensor bad = makeTensor(DType::kI64, {2}, {1, 9});
  auto result = runKernel(OpId::gather_grad, {&dy, &bad}, {{"data_shape", Ints{4, 3}}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(result.status().message().find("gather_grad: index 9"), std::string::npos) << result.status().message();
  // An embedding table's gradient: many lookups of few rows, wide rows.
  std::mt19937 rng(39);
  const HostTensor tokens = randomIntTensor(DType::kI64, {64, 32}, rng, 0, 49);
  const HostTensor grads = randomTensor(DType::kF32, {64, 32, 2048}, rng);
  const AttrMap a = {{"data_shape", Ints{50, 2048}}};
  expectIdentical(run(OpId::gather_grad, {&grads, &tokens}, a, 1)[0], run(OpId::gather_grad, {&grads, &tokens}, a, 4)[0],
                  "gather_grad");
}

TEST(CpuKernelsGradient, SliceGradientMatchesFiniteDifferences) {
  std::mt19937 rng(40);
  const Shape shape = {4, 5, 6};
  const HostTensor x = randomTensor(DType::kF64, shape, rng);
  const std::vector<AttrMap> cases = {
      {{"starts", Ints{-1, 1}}, {"ends", Ints{0, 6}}, {"axes", Ints{2, 0}}, {"steps", Ints{-2, 2}}},
      {{"starts", Ints{1, -100}}, {"ends", Ints{3, 100}}},
      {{"starts", Ints{100}}, {"ends", Ints{-100}}, {"axes", Ints{1}}, {"steps", Ints{-3}}},
  };
  for (const AttrMap& a : cases) {
    const HostTensor y = forward(OpId::slice, {&x}, a);
    const std::vector<double> weights = randomWeights(y.numel(), rng);
    const HostTensor dy = asTensor(weights, y.type.shape);
    AttrMap grad_attrs = a;
    grad_attrs["input_shape"] = shape;
    expectClose(run(OpId::slice_grad, {&dy}, grad_attrs)[0],
                finiteDifferenceGradient(x, weights, [&](const HostTensor& at) { return forward(OpId::slice, {&at}, a); }),
                kGradientTolerance, kGradientTolerance, "slice_grad " + y.type.str());
  }
}

// ---- softmax_cross_entropy_grad ----

TEST(CpuKernelsGradient, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  std::mt19937 rng(41);
  const HostTensor logits = randomTensor(DType::kF64, {2, 3, 5}, rng, -3, 3);
  for (DType label_type : {DType::kI64, DType::kI32}) {
    const HostTensor labels = makeTensor(label_type, {2, 3}, {0, 4, 7, 2, 2, 1});
    const AttrMap a = {{"ignore_index", int64_t{7}}};
    const HostTensor dloss = makeTensor(DType::kF32, {}, {0.75});
    const auto dlogits = run(OpId::softmax_cross_entropy_grad, {&dloss, &logits, &labels}, a);
    // The loss is an f32 scalar, so the step is large (1e-2) to keep its rounding (about 1e-7)
    // out of the difference; the tolerance allows the step's O(h²) truncation error.
    const auto expected = finiteDifferenceGradient(
        logits, {0.75}, [&](const HostTensor& at) { return forward(OpId::softmax_cross_entropy, {&at, &labels}, a); }, 1e-2);
    expectClose(dlogits[0], expected, 1e-3, 5e-5, "softmax_cross_entropy_grad " + labels.type.str());
    // And exactly (in f64): 0.75 · (softmax(row) − onehot(label)) / 5 counted rows; 0 for the ignored row.
    std::vector<double> closed_form;
    for (int64_t r = 0; r < 6; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < 5; ++c) sum += std::exp(logits.at(r * 5 + c));
      for (int64_t c = 0; c < 5; ++c)
        closed_form.push_back(labels.at(r) == 7 ? 0.0
                                                : 0.75 * (std::exp(logits.at(r * 5 + c)) / sum - (labels.at(r) == c)) / 5);
    }
    expectClose(dlogits[0], closed_form, 1e-12, 1e-15, "softmax_cross_entropy_grad closed form");
  }
  const HostTensor bad = makeTensor(DType::kI64, {2, 3}, {0, 5, 1, 1, 1, 1});
  const HostTensor dloss = makeTensor(DType::kF32, {}, {1});
  auto result = runKernel(OpId::softmax_cross_entropy_grad, {&dloss, &logits, &bad}, {});
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("softmax_cross_entropy_grad: label 5 at position 1"), std::string::npos)
      << result.status().message();
}

// ---- Optimizers ----

// Runs an optimizer op on copies of its operands with each result sharing its state operand's
// memory, as plans update parameters in place; returns the results.
std::vector<HostTensor> runInPlace(OpId op, std::vector<HostTensor> operands, const std::vector<int>& result_operand,
                                   const AttrMap& a) {
  std::vector<TensorType> types;
  for (const HostTensor& t : operands) types.push_back(t.type);
  auto result_types = inferResultTypes(opDef(op), types, a);
  EXPECT_TRUE(result_types.hasValue());
  std::vector<const void*> inputs;
  for (HostTensor& t : operands) inputs.push_back(t.bytes());
  std::vector<void*> outputs;
  for (int index : result_operand) outputs.push_back(operands[index].bytes());
  KernelCall call{OpContext{opDef(op), types, *result_types, a}, inputs, outputs, 2};
  EXPECT_TRUE(findCpuKernel(op)(call).isOk());
  std::vector<HostTensor> results;
  for (int index : result_operand) results.push_back(operands[index]);
  return results;
}

TEST(CpuKernelsOptimizer, SgdMatchesTheFormulaOverThreeSteps) {
  std::mt19937 rng(42);
  const Shape shape = {37};
  const HostTensor w0 = randomTensor(DType::kF64, shape, rng);
  std::vector<HostTensor> grads;
  for (int s = 0; s < 3; ++s) grads.push_back(randomTensor(DType::kF64, shape, rng));
  struct Config {
    double lr, momentum, dampening, weight_decay;
    int64_t nesterov;
  };
  for (const Config& c : {Config{0.1, 0, 0, 0, 0}, Config{0.1, 0.9, 0.1, 0.01, 0}, Config{0.05, 0.8, 0, 0.001, 1},
                          Config{0.2, 0, 0, 0.05, 0}}) {
    const AttrMap a = {{"lr", c.lr}, {"momentum", c.momentum}, {"dampening", c.dampening},
                       {"weight_decay", c.weight_decay}, {"nesterov", c.nesterov}};
    std::vector<double> w = w0.values(), buffer(w.size());
    HostTensor param = w0, momentum_buffer(w0.type);
    for (int s = 0; s < 3; ++s) {
      // The reference: torch.optim.SGD's documented update.
      for (size_t i = 0; i < w.size(); ++i) {
        double d = grads[s].at(i) + c.weight_decay * w[i];
        if (c.momentum != 0) {
          buffer[i] = s == 0 ? d : c.momentum * buffer[i] + (1 - c.dampening) * d;
          d = c.nesterov ? d + c.momentum * buffer[i] : buffer[i];
        }
        w[i] -= c.lr * d;
      }
      const HostTensor step = makeTensor(DType::kI64, {}, {static_cast<double>(s)});
      std::vector<HostTensor> operands = {param, grads[s], step};
      std::vector<int> results = {0};
      if (c.momentum != 0) {
        operands.push_back(momentum_buffer);
        results.push_back(3);
      }
      std::vector<HostTensor> updated = runInPlace(OpId::sgd_update, operands, results, a);
      param = updated[0];
      if (c.momentum != 0) momentum_buffer = updated[1];
    }
    expectClose(param, w, 1e-14, 1e-15, "sgd momentum " + std::to_string(c.momentum));
  }
}

TEST(CpuKernelsOptimizer, AdamwMatchesTheFormulaOverThreeSteps) {
  std::mt19937 rng(43);
  const Shape shape = {41};
  for (DType dtype : {DType::kF64, DType::kF32}) {
    const HostTensor w0 = randomTensor(dtype, shape, rng);
    const double lr = 0.01, beta1 = 0.85, beta2 = 0.99, eps = 1e-7, weight_decay = 0.05;
    const AttrMap a = {{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", weight_decay}};
    std::vector<double> w = w0.values(), m(w.size()), v(w.size());
    HostTensor param = w0, first(w0.type), second(w0.type);
    for (int s = 0; s < 3; ++s) {
      const HostTensor g = randomTensor(dtype, shape, rng);
      // The reference: torch.optim.AdamW's documented update, in double.
      const double t = s + 1;
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] *= 1 - lr * weight_decay;
        m[i] = beta1 * m[i] + (1 - beta1) * g.at(i);
        v[i] = beta2 * v[i] + (1 - beta2) * g.at(i) * g.at(i);
        const double m_hat = m[i] / (1 - std::pow(beta1, t)), v_hat = v[i] / (1 - std::pow(beta2, t));
        w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      const HostTensor step = makeTensor(DType::kI64, {}, {static_cast<double>(s)});
      const auto updated = runInPlace(OpId::adamw_update, {param, g, first, second, step}, {0, 2, 3}, a);
      param = updated[0];
      first = updated[1];
      second = updated[2];
    }
    expectClose(param, w, dtype == DType::kF64 ? 1e-13 : 2e-6, 1e-7, "adamw " + param.type.str());
  }
}

// Operands and PyTorch 1.13 results (torch.manual_seed(7); w0 and three gradients from
// torch.randn(16); torch.optim with foreach=False): the f32 kernels must agree bit for bit.
constexpr float kW0[16] = {
    -0x1.a3e8acp-1f, 0x1.952056p-2f, 0x1.cc3dbcp-1f, -0x1.636e70p+0f,
    -0x1.560202p-3f, 0x1.23fe5ap-2f, -0x1.483d26p-1f, -0x1.c98d34p-1f,
    0x1.da63d8p-1f, -0x1.122ea8p-1f, -0x1.28e36ep+0f, -0x1.d73370p-2f,
    0x1.6ac5a2p-1f, 0x1.0343f0p+0f, 0x1.d7da50p-3f, 0x1.171510p+0f};
constexpr float kGrads[3][16] = {{
    -0x1.952982p+0f, -0x1.4c5b32p-2f, 0x1.ed2676p+0f, -0x1.51ee98p-2f,
    0x1.966a5cp-3f, 0x1.906bd4p-1f, 0x1.0a02f6p+0f, -0x1.72f312p-1f,
    -0x1.acbaacp-3f, -0x1.b904fap-3f, -0x1.d0d398p+0f, -0x1.61871cp-2f,
    -0x1.07de82p+1f, 0x1.5923bap-1f, -0x1.52c6cap+0f, -0x1.5c19d2p+0f}, {
    -0x1.5621b2p-4f, -0x1.80a996p-6f, 0x1.651ee8p-3f, 0x1.263018p+1f,
    0x1.ea094cp-1f, -0x1.52e04ep-1f, -0x1.a82adep-1f, -0x1.361bbap-1f,
    -0x1.66b860p+0f, 0x1.4c1e34p+0f, 0x1.a41434p+0f, -0x1.0e82dap+0f,
    -0x1.0bdd64p-2f, -0x1.0022c4p-2f, 0x1.0092fep-1f, 0x1.0a46eep-2f}, {
    -0x1.6cf040p-3f, -0x1.09ba12p-2f, -0x1.dabda8p-7f, -0x1.891ab8p-2f,
    -0x1.7bab74p+1f, -0x1.0f8088p+0f, -0x1.3c6986p-2f, 0x1.de5b06p-1f,
    0x1.9fd334p+0f, 0x1.9ad9c2p-10f, -0x1.c00aacp-2f, -0x1.0de46cp+1f,
    0x1.251f36p+0f, -0x1.875b54p-2f, -0x1.6bcadcp-2f, 0x1.822586p-1f}};
constexpr float kSgdResult[16] = {  // SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
    -0x1.6daba0p-2f, 0x1.0479e2p-1f, 0x1.608134p-2f, -0x1.a66550p+0f,
    -0x1.dcfb6ep-4f, 0x1.1f44b8p-2f, -0x1.7fc0eap-1f, -0x1.58c47ap-1f,
    0x1.1253acp+0f, -0x1.647c74p-1f, -0x1.ce707ap-1f, 0x1.9037fap-8f,
    0x1.3452c0p+0f, 0x1.cddc20p-1f, 0x1.113d14p-1f, 0x1.570f7cp+0f};
constexpr float kNesterovResult[16] = {  // SGD(lr=0.05, momentum=0.8, weight_decay=0.001, nesterov=True)
    -0x1.1ebe58p-1f, 0x1.e0e09ep-2f, 0x1.304ba6p-1f, -0x1.95c49cp+0f,
    -0x1.790a82p-5f, 0x1.621f74p-2f, -0x1.54a6f8p-1f, -0x1.97dd46p-1f,
    0x1.f6b5eap-1f, -0x1.52ea86p-1f, -0x1.0d5948p+0f, -0x1.72244ep-4f,
    0x1.e1fbc6p-1f, 0x1.f4a4c2p-1f, 0x1.95f782p-2f, 0x1.30db40p+0f};
constexpr float kAdamwResult[16] = {  // AdamW(lr=0.03, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    -0x1.7dac50p-1f, 0x1.ded61ep-2f, 0x1.a62e36p-1f, -0x1.60b254p+0f,
    -0x1.aa0264p-3f, 0x1.13b430p-2f, -0x1.521a22p-1f, -0x1.a6ed8cp-1f,
    0x1.f0b86cp-1f, -0x1.121bb6p-1f, -0x1.1e6aaap+0f, -0x1.7b630ep-2f,
    0x1.83c656p-1f, 0x1.efc4a2p-1f, 0x1.1e22c8p-2f, 0x1.1f87cep+0f};

HostTensor floats(const float* values) {
  HostTensor t(TensorType{DType::kF32, {16}});
  std::memcpy(t.bytes(), values, 16 * sizeof(float));
  return t;
}

void expectBitwise(const HostTensor& actual, const float* expected, const std::string& what) {
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(actual.data<float>()[i], expected[i]) << what << ": element " << i << " differs from PyTorch's";
}

TEST(CpuKernelsOptimizer, Float32UpdatesEqualPyTorchBitForBit) {
  const std::vector<std::pair<AttrMap, const float*>> sgd_cases = {
      {{{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.01}}, kSgdResult},
      {{{"lr", 0.05}, {"momentum", 0.8}, {"weight_decay", 0.001}, {"nesterov", int64_t{1}}}, kNesterovResult},
  };
  for (const auto& [a, expected] : sgd_cases) {
    HostTensor w = floats(kW0), buffer(TensorType{DType::kF32, {16}});
    for (int s = 0; s < 3; ++s) {
      const HostTensor step = makeTensor(DType::kI64, {}, {static_cast<double>(s)});
      const auto updated = runInPlace(OpId::sgd_update, {w, floats(kGrads[s]), step, buffer}, {0, 3}, a);
      w = updated[0];
      buffer = updated[1];
    }
    expectBitwise(w, expected, "sgd_update");
  }
  const AttrMap adamw = {{"lr", 0.03}, {"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}, {"weight_decay", 0.1}};
  HostTensor w = floats(kW0), m(TensorType{DType::kF32, {16}}), v(TensorType{DType::kF32, {16}});
  for (int s = 0; s < 3; ++s) {
    const HostTensor step = makeTensor(DType::kI64, {}, {static_cast<double>(s)});
    const auto updated = runInPlace(OpId::adamw_update, {w, floats(kGrads[s]), m, v, step}, {0, 2, 3}, adamw);
    w = updated[0];
    m = updated[1];
    v = updated[2];
  }
  expectBitwise(w, kAdamwResult, "adamw_update");
}

TEST(CpuKernelsOptimizer, SeparateResultBuffersGiveTheSameUpdate) {
  std::mt19937 rng(44);
  const HostTensor w = randomTensor(DType::kF32, {50000}, rng), g = randomTensor(DType::kF32, {50000}, rng);
  const HostTensor m = randomTensor(DType::kF32, {50000}, rng), v = randomTensor(DType::kF32, {50000}, rng, 0, 1);
  const HostTensor step = makeTensor(DType::kI64, {}, {4});
  const AttrMap a = {{"lr", 0.001}};
  const auto separate = run(OpId::adamw_update, {&w, &g, &m, &v, &step}, a, 4);
  const auto in_place = runInPlace(OpId::adamw_update, {w, g, m, v, step}, {0, 2, 3}, a);
  for (int i = 0; i < 3; ++i) expectIdentical(separate[i], in_place[i], "adamw_update result " + std::to_string(i));
}

}  // namespace
}  // namespace cleave::runtime::kernel_test
