// Tests of the CPU kernels of the elementwise, reduction, normalisation, shape and loss ops beyond the
// op harness (tests/ops), which checks every op against its reference: integer wrapping, errors,
// NaN handling, hand-computed edge cases, threading.
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>

#include "runtime/device/kernel.h"
#include "tests/unit/cpu_kernel_test_support.h"

namespace cleave::runtime::kernel_test {
namespace {

using Ints = std::vector<int64_t>;

// Which ops have a CPU kernel (every op but the communication ops) is checked by the op harness
// (tests/ops), which runs every op's declared cases against its reference.

// ---- Elementwise arithmetic (float cases against the reference: tests/ops/elementwise_cases.cpp) ----

TEST(CpuKernels, IntegerArithmeticWrapsAndTruncates) {
  const HostTensor a8 = makeTensor(DType::kI8, {4}, {100, -128, 7, -7});
  const HostTensor b8 = makeTensor(DType::kI8, {4}, {100, -1, 2, 2});
  expectClose(run(OpId::add, {&a8, &b8})[0], {-56, 127, 9, -5}, 0, 0, "i8 add wraps");
  expectClose(run(OpId::div, {&a8, &b8})[0], {1, -128, 3, -3}, 0, 0, "i8 div truncates, -128/-1 wraps");
  expectClose(run(OpId::mul, {&a8, &b8})[0], {16, -128, 14, -14}, 0, 0, "i8 mul wraps");
  const HostTensor u = makeTensor(DType::kU8, {3}, {5, 250, 0});
  const HostTensor v = makeTensor(DType::kU8, {3}, {10, 10, 1});
  expectClose(run(OpId::sub, {&u, &v})[0], {251, 240, 255}, 0, 0, "u8 sub wraps");
  const HostTensor base = makeTensor(DType::kI64, {5}, {2, -3, 1, -1, 5});
  const HostTensor exponent = makeTensor(DType::kI64, {5}, {10, 3, -4, -3, -1});
  expectClose(run(OpId::pow, {&base, &exponent})[0], {1024, -27, 1, -1, 0}, 0, 0, "i64 pow");
  const HostTensor big = makeTensor(DType::kI32, {2, 1}, {2000000000, -6});
  const HostTensor small = makeTensor(DType::kI32, {3}, {2000000000, 4, -4});
  std::vector<double> expected;
  for (double x : {2000000000.0, -6.0})
    for (double y : {2000000000.0, 4.0, -4.0}) expected.push_back(static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(
        static_cast<int64_t>(x) + static_cast<int64_t>(y)))));
  expectClose(run(OpId::add, {&big, &small})[0], expected, 0, 0, "i32 broadcast add wraps");
}

TEST(CpuKernels, IntegerDivisionByZeroAndZeroToNegativePowerAreErrors) {
  const HostTensor a = makeTensor(DType::kI32, {3}, {1, 2, 3});
  const HostTensor b = makeTensor(DType::kI32, {3}, {1, 0, 3});
  auto div = runKernel(OpId::div, {&a, &b}, {});
  ASSERT_FALSE(div);
  EXPECT_EQ(div.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(div.status().message().find("div: integer division by zero"), std::string::npos) << div.status().message();
  const HostTensor zero = makeTensor(DType::kI64, {2}, {0, 2});
  const HostTensor negative = makeTensor(DType::kI64, {2}, {-1, -1});
  auto pow = runKernel(OpId::pow, {&zero, &negative}, {});
  ASSERT_FALSE(pow);
  EXPECT_NE(pow.status().message().find("pow: zero raised to a negative"), std::string::npos);
}

TEST(CpuKernels, HalfPrecisionMathIsReportedUnsupported) {
  const HostTensor a(TensorType{DType::kF16, {3}});
  auto result = runKernel(OpId::add, {&a, &a}, {});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().kind(), ErrorKind::kBadInput);
  EXPECT_EQ(result.status().message(), "add: f16 not supported on cpu yet");
}

// ---- Comparisons ----

TEST(CpuKernels, ComparisonsBroadcastAndGiveBool) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor a = makeTensor(DType::kF32, {2, 3}, {1, 2, 3, nan, 5, 6});
  const HostTensor b = makeTensor(DType::kF32, {3}, {2, 2, nan});
  const std::vector<std::pair<OpId, std::vector<double>>> cases = {
      {OpId::equal, {0, 1, 0, 0, 0, 0}},         {OpId::less, {1, 0, 0, 0, 0, 0}},
      {OpId::less_equal, {1, 1, 0, 0, 0, 0}},    {OpId::greater, {0, 0, 0, 0, 1, 0}},
      {OpId::greater_equal, {0, 1, 0, 0, 1, 0}},
  };
  for (const auto& [op, expected] : cases) {
    const auto out = run(op, {&a, &b});
    ASSERT_EQ(out[0].type, (TensorType{DType::kBool, {2, 3}}));
    expectClose(out[0], expected, 0, 0, std::string(opName(op)));
  }
  const HostTensor p = makeTensor(DType::kBool, {4}, {0, 1, 1, 0});
  const HostTensor q = makeTensor(DType::kBool, {4}, {0, 1, 0, 1});
  expectClose(run(OpId::equal, {&p, &q})[0], {1, 1, 0, 0}, 0, 0, "bool equal");
  const HostTensor i = makeTensor(DType::kI64, {3}, {-5, 0, 9});
  const HostTensor j = makeTensor(DType::kI64, {}, {0});
  expectClose(run(OpId::greater, {&i, &j})[0], {0, 0, 1}, 0, 0, "i64 greater than a scalar");
}

// ---- Unary math (float cases against the reference: tests/ops/elementwise_cases.cpp) ----

TEST(CpuKernels, NegAndReluOnIntegersAndNaN) {
  const HostTensor i = makeTensor(DType::kI32, {4}, {-3, 0, 7, -2147483648.0});
  expectClose(run(OpId::neg, {&i})[0], {3, 0, -7, -2147483648.0}, 0, 0, "i32 neg wraps");
  expectClose(run(OpId::relu, {&i})[0], {0, 0, 7, 0}, 0, 0, "i32 relu");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor f = makeTensor(DType::kF32, {3}, {-1, nan, 2});
  expectClose(run(OpId::relu, {&f})[0], {0, nan, 2}, 0, 0, "relu keeps NaN");
}

TEST(CpuKernels, ClipFloatsAndIntegers) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor f = makeTensor(DType::kF64, {5}, {-3, -0.5, 0.25, 9, nan});
  expectClose(run(OpId::clip, {&f}, {{"min", -1.0}, {"max", 0.5}})[0], {-1, -0.5, 0.25, 0.5, nan}, 0, 0, "f64 clip");
  expectClose(run(OpId::clip, {&f}, {{"min", 0.0}})[0], {0, 0, 0.25, 9, nan}, 0, 0, "f64 clip without max");
  const HostTensor i = makeTensor(DType::kI64, {5}, {-5, -2, 0, 3, 8});
  expectClose(run(OpId::clip, {&i}, {{"min", -2.5}, {"max", 3.7}})[0], {-2, -2, 0, 3, 3}, 0, 0, "i64 clip rounds inward");
}

// ---- cast, where, dropout, identity ----

TEST(CpuKernels, CastConvertsEveryWay) {
  const HostTensor f = makeTensor(DType::kF32, {6}, {-2.7, 2.7, 0, 1.5, -0.0, 1e10});
  expectClose(run(OpId::cast, {&f}, {{"to", std::string("i64")}})[0], {-2, 2, 0, 1, 0, 1e10}, 0, 0, "f32 -> i64");
  expectClose(run(OpId::cast, {&f}, {{"to", std::string("bool")}})[0], {1, 1, 0, 1, 0, 1}, 0, 0, "f32 -> bool");
  expectClose(run(OpId::cast, {&f}, {{"to", std::string("f64")}})[0], f.values(), 0, 0, "f32 -> f64");
  const HostTensor half_roundtrip = run(OpId::cast, {&f}, {{"to", std::string("f16")}})[0];
  expectClose(run(OpId::cast, {&half_roundtrip}, {{"to", std::string("f32")}})[0],
              {-2.69921875, 2.69921875, 0, 1.5, 0, std::numeric_limits<double>::infinity()}, 0, 0, "f32 -> f16 -> f32");
  const HostTensor bf = run(OpId::cast, {&f}, {{"to", std::string("bf16")}})[0];
  expectClose(run(OpId::cast, {&bf}, {{"to", std::string("f64")}})[0], {-2.703125, 2.703125, 0, 1.5, 0, 9999220736.0}, 0,
              0, "f32 -> bf16 -> f64");
  const HostTensor wide = makeTensor(DType::kI64, {4}, {300, -129, 255, -1});
  expectClose(run(OpId::cast, {&wide}, {{"to", std::string("i8")}})[0], {44, 127, -1, -1}, 0, 0, "i64 -> i8 wraps");
  expectClose(run(OpId::cast, {&wide}, {{"to", std::string("u8")}})[0], {44, 127, 255, 255}, 0, 0, "i64 -> u8 wraps");
  expectClose(run(OpId::cast, {&wide}, {{"to", std::string("f32")}})[0], {300, -129, 255, -1}, 0, 0, "i64 -> f32");
  const HostTensor flags = makeTensor(DType::kBool, {3}, {1, 0, 1});
  expectClose(run(OpId::cast, {&flags}, {{"to", std::string("i32")}})[0], {1, 0, 1}, 0, 0, "bool -> i32");
}

// Float to integer as PyTorch casts on x86 (ir/ops/float_to_integer.h): NaN, ±inf and out-of-range
// values give INT32_MIN, which u8 and i8 wrap to 0; values within int32 wrap as integers do.
TEST(CpuKernels, CastOfAnUnrepresentableValueIsPyTorchs) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor f = makeTensor(DType::kF32, {5}, {1, 300.7, -5, -inf, nan});
  expectClose(run(OpId::cast, {&f}, {{"to", std::string("u8")}})[0], {1, 44, 251, 0, 0}, 0, 0, "f32 to u8");
  expectClose(run(OpId::cast, {&f}, {{"to", std::string("i8")}})[0], {1, 44, -5, 0, 0}, 0, 0, "f32 to i8");
  const HostTensor d = makeTensor(DType::kF64, {3}, {nan, 3e9, -2.9});
  expectClose(run(OpId::cast, {&d}, {{"to", std::string("i32")}})[0], {INT32_MIN, INT32_MIN, -2}, 0, 0, "f64 to i32");
}

TEST(CpuKernels, WhereBroadcastsAllThreeOperands) {
  std::mt19937 rng(3);
  const HostTensor cond = randomIntTensor(DType::kBool, {3, 1, 5}, rng, 0, 1);
  for (DType dtype : {DType::kF32, DType::kI64, DType::kU8, DType::kF16}) {
    const HostTensor a = randomIntTensor(dtype, {4, 1}, rng, 0, 100);
    const HostTensor b = randomIntTensor(dtype, {}, rng, 0, 100);
    const auto out = run(OpId::where, {&cond, &a, &b});
    ASSERT_EQ(out[0].type, (TensorType{dtype, {3, 4, 5}}));
    std::vector<double> expected;
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const auto index = unravel(i, {3, 4, 5});
      expected.push_back(cond.at(broadcastOffset(index, cond.type.shape)) != 0 ? a.at(broadcastOffset(index, a.type.shape))
                                                                              : b.at(0));
    }
    expectClose(out[0], expected, 0, 0, "where " + a.type.str());
  }
}

TEST(CpuKernels, DropoutAndIdentityCopy) {
  std::mt19937 rng(4);
  const HostTensor x = randomTensor(DType::kF32, {17, 3}, rng);
  expectClose(run(OpId::identity, {&x})[0], x.values(), 0, 0, "identity");
  expectClose(run(OpId::dropout, {&x}, {{"ratio", 0.3}})[0], x.values(), 0, 0, "dropout (inference)");
}

// ---- Reductions ----

TEST(CpuKernels, ReductionsOverAnyAxes) {
  std::mt19937 rng(5);
  const Shape shape = {3, 4, 5, 6};
  const std::vector<Ints> axes_cases = {{}, {0}, {1, 3}, {-1}, {0, 2}, {2, 3}, {0, 1, 2, 3}, {1}, {0, 3}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
    const HostTensor x = dtype == DType::kI32 ? randomIntTensor(dtype, shape, rng, -50, 50) : randomTensor(dtype, shape, rng);
    for (OpId op : {OpId::reduce_sum, OpId::reduce_mean, OpId::reduce_max}) {
      for (const Ints& axes : axes_cases) {
        for (int64_t keepdims : {0, 1}) {
          const auto out = run(op, {&x}, {{"axes", axes}, {"keepdims", keepdims}});
          ASSERT_EQ(out.size(), 1u);
          std::vector<bool> reduced(4, axes.empty());
          for (int64_t a : axes) reduced[(a + 4) % 4] = true;
          Shape kept;
          for (int d = 0; d < 4; ++d) kept.push_back(reduced[d] ? 1 : shape[d]);
          std::vector<double> sums(static_cast<size_t>(out[0].numel()), 0.0);
          std::vector<double> maxes(sums.size(), -std::numeric_limits<double>::infinity());
          std::vector<int64_t> counts(sums.size(), 0);
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int64_t o = broadcastOffset(unravel(i, shape), kept);
            sums[o] += x.at(i);
            maxes[o] = std::max(maxes[o], x.at(i));
            ++counts[o];
          }
          std::vector<double> expected;
          for (size_t o = 0; o < sums.size(); ++o) {
            if (op == OpId::reduce_sum) expected.push_back(sums[o]);
            if (op == OpId::reduce_max) expected.push_back(maxes[o]);
            if (op == OpId::reduce_mean)
              expected.push_back(dtype == DType::kI32 ? std::trunc(sums[o] / counts[o]) : sums[o] / counts[o]);
          }
          expectClose(out[0], expected, dtype == DType::kF32 ? 1e-6 : 1e-13, 1e-6,
                      std::string(opName(op)) + " " + x.type.str() + " axes " + shapeStr(axes));
        }
      }
    }
  }
}

TEST(CpuKernels, ReduceMaxPropagatesNaNAndEmptySumIsZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor x = makeTensor(DType::kF32, {2, 3}, {1, nan, 3, 4, 5, 6});
  expectClose(run(OpId::reduce_max, {&x}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}})[0], {nan, 6}, 0, 0, "max NaN");
  const HostTensor empty(TensorType{DType::kF32, {0, 3}});
  expectClose(run(OpId::reduce_sum, {&empty}, {{"axes", Ints{0}}})[0], {0, 0, 0}, 0, 0, "sum of nothing");
}

// ---- softmax, log_softmax, layer_norm, batch_norm ----

TEST(CpuKernels, SoftmaxAndLogSoftmaxAlongAnyAxis) {
  std::mt19937 rng(6);
  const Shape shape = {4, 7, 5};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    HostTensor x = randomTensor(dtype, shape, rng, -5, 5);
    x.set(3, 1000);  // large values must not overflow
    for (int64_t axis : {-1, 1, 0}) {
      for (bool log : {false, true}) {
        const auto out = run(log ? OpId::log_softmax : OpId::softmax, {&x}, {{"axis", axis}});
        const int64_t a = (axis + 3) % 3;
        std::vector<double> expected(static_cast<size_t>(x.numel()));
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto index = unravel(i, shape);
          double max = -INFINITY, sum = 0;
          for (int64_t l = 0; l < shape[a]; ++l) {
            index[a] = l;
            max = std::max(max, x.at(broadcastOffset(index, shape)));
          }
          for (int64_t l = 0; l < shape[a]; ++l) {
            index[a] = l;
            sum += std::exp(x.at(broadcastOffset(index, shape)) - max);
          }
          expected[i] = log ? x.at(i) - max - std::log(sum) : std::exp(x.at(i) - max) / sum;
        }
        expectClose(out[0], expected, dtype == DType::kF32 ? 2e-6 : 1e-13, 1e-7,
                    std::string(log ? "log_softmax" : "softmax") + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST(CpuKernels, LayerNormOverTrailingDims) {
  std::mt19937 rng(7);
  const Shape shape = {3, 4, 6};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const HostTensor x = randomTensor(dtype, shape, rng, -3, 3);
    for (int64_t axis : {-1, 1}) {
      const Shape normalized(shape.begin() + (axis + 3) % 3, shape.end());
      const HostTensor scale = randomTensor(dtype, normalized, rng);
      const HostTensor bias = randomTensor(dtype, normalized, rng);
      for (bool with_bias : {false, true}) {
        std::vector<const HostTensor*> operands = {&x, &scale};
        if (with_bias) operands.push_back(&bias);
        const auto out = run(OpId::layer_norm, operands, {{"axis", axis}, {"epsilon", 1e-3}});
        const int64_t cols = scale.numel(), rows = x.numel() / cols;
        std::vector<double> expected;
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t c = 0; c < cols; ++c) mean += x.at(r * cols + c) / cols;
          for (int64_t c = 0; c < cols; ++c) var += std::pow(x.at(r * cols + c) - mean, 2) / cols;
          for (int64_t c = 0; c < cols; ++c)
            expected.push_back((x.at(r * cols + c) - mean) / std::sqrt(var + 1e-3) * scale.at(c) +
                               (with_bias ? bias.at(c) : 0));
        }
        expectClose(out[0], expected, dtype == DType::kF32 ? 1e-5 : 1e-12, 1e-6, "layer_norm axis " + std::to_string(axis));
      }
    }
  }
}

TEST(CpuKernels, BatchNormInference) {
  std::mt19937 rng(8);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const HostTensor x = randomTensor(dtype, {2, 3, 4, 5}, rng, -2, 2);
    const HostTensor scale = randomTensor(dtype, {3}, rng), bias = randomTensor(dtype, {3}, rng);
    const HostTensor mean = randomTensor(dtype, {3}, rng), var = randomTensor(dtype, {3}, rng, 0.1, 2);
    const auto out = run(OpId::batch_norm, {&x, &scale, &bias, &mean, &var}, {{"epsilon", 1e-4}});
    std::vector<double> expected;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = i / 20 % 3;
      expected.push_back((x.at(i) - mean.at(c)) / std::sqrt(var.at(c) + 1e-4) * scale.at(c) + bias.at(c));
    }
    expectClose(out[0], expected, dtype == DType::kF32 ? 1e-5 : 1e-12, 1e-6, "batch_norm " + x.type.str());
  }
}

// ---- Shape and data movement ----

TEST(CpuKernels, RelabellingOpsKeepTheElements) {
  std::mt19937 rng(9);
  const HostTensor x = randomTensor(DType::kF32, {2, 1, 3, 4}, rng);
  const std::vector<std::pair<OpId, AttrMap>> cases = {
      {OpId::reshape, {{"shape", Ints{4, -1, 0}}}},
      {OpId::flatten, {{"axis", int64_t{2}}}},
      {OpId::squeeze, {}},
      {OpId::unsqueeze, {{"axes", Ints{0, -1}}}},
  };
  for (const auto& [op, a] : cases) expectClose(run(op, {&x}, a)[0], x.values(), 0, 0, std::string(opName(op)));
}

TEST(CpuKernels, TransposeEveryPermutationOfRankFour) {
  std::mt19937 rng(10);
  const Shape shape = {2, 3, 4, 5};
  const HostTensor x = randomIntTensor(DType::kI32, shape, rng, -1000, 1000);
  Ints perm = {0, 1, 2, 3};
  do {
    const auto out = run(OpId::transpose, {&x}, {{"perm", perm}});
    std::vector<double> expected;
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const auto index = unravel(i, out[0].type.shape);
      std::vector<int64_t> source(4);
      for (int k = 0; k < 4; ++k) source[perm[k]] = index[k];
      expected.push_back(x.at(broadcastOffset(source, shape)));
    }
    expectClose(out[0], expected, 0, 0, "transpose " + shapeStr(perm));
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(CpuKernels, TransposeLargeTiledAndDefault) {
  std::mt19937 rng(11);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{67, 45}, {}}, {{3, 70, 33}, {2, 0, 1}}, {{5, 1, 40, 1, 37}, {4, 2, 0, 1, 3}}, {{9, 8, 7}, {1, 0, 2}}};
  for (DType dtype : {DType::kF64, DType::kU8, DType::kF16}) {
    for (const auto& [shape, perm_attr] : cases) {
      const HostTensor x = randomIntTensor(dtype, shape, rng, 0, 200);
      Ints perm = perm_attr;
      if (perm.empty())
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
      const auto out = run(OpId::transpose, {&x}, {{"perm", perm_attr}});
      std::vector<double> expected;
      for (int64_t i = 0; i < out[0].numel(); ++i) {
        const auto index = unravel(i, out[0].type.shape);
        std::vector<int64_t> source(shape.size());
        for (size_t k = 0; k < shape.size(); ++k) source[perm[k]] = index[k];
        expected.push_back(x.at(broadcastOffset(source, shape)));
      }
      expectClose(out[0], expected, 0, 0, "transpose " + x.type.str() + " " + shapeStr(perm));
    }
  }
}

TEST(CpuKernels, ConcatAndSplitAlongEachAxis) {
  std::mt19937 rng(12);
  for (int64_t axis : {0, 1, 2, -1}) {
    const int64_t a = (axis + 3) % 3;
    std::vector<HostTensor> pieces;
    std::vector<int64_t> sizes = {2, 0, 3};
    for (int64_t size : sizes) {
      Shape shape = {2, 3, 4};
      shape[a] = size;
      pieces.push_back(randomTensor(DType::kF32, shape, rng));
    }
    const auto joined = run(OpId::concat, {&pieces[0], &pieces[1], &pieces[2]}, {{"axis", axis}});
    Shape out_shape = {2, 3, 4};
    out_shape[a] = 5;
    ASSERT_EQ(joined[0].type.shape, out_shape);
    std::vector<double> expected;
    for (int64_t i = 0; i < joined[0].numel(); ++i) {
      auto index = unravel(i, out_shape);
      const int piece = index[a] < 2 ? 0 : 2;
      index[a] -= piece == 0 ? 0 : 2;
      expected.push_back(pieces[piece].at(broadcastOffset(index, pieces[piece].type.shape)));
    }
    expectClose(joined[0], expected, 0, 0, "concat axis " + std::to_string(axis));
    const auto split = run(OpId::split, {&joined[0]}, {{"axis", axis}, {"sizes", sizes}});
    ASSERT_EQ(split.size(), 3u);
    for (int p = 0; p < 3; ++p) expectClose(split[p], pieces[p].values(), 0, 0, "split piece " + std::to_string(p));
  }
}

TEST(CpuKernels, ConcatOfManyRowsRunsInParallel) {
  std::mt19937 rng(13);
  const HostTensor a = randomTensor(DType::kF32, {20000, 7}, rng), b = randomTensor(DType::kF32, {20000, 5}, rng);
  const auto serial = run(OpId::concat, {&a, &b}, {{"axis", int64_t{1}}}, 1);
  const auto parallel = run(OpId::concat, {&a, &b}, {{"axis", int64_t{1}}}, 4);
  expectIdentical(serial[0], parallel[0], "concat");
  EXPECT_EQ(serial[0].at(7), b.at(0));
}

TEST(CpuKernels, SliceWithNegativeStepsAndClamping) {
  std::vector<double> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(i);
  const HostTensor x = makeTensor(DType::kI64, {10}, ten);
  struct Case {
    Ints starts, ends, steps;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {{-1}, {-100}, {-2}, {9, 7, 5, 3, 1}},
      {{8}, {2}, {-3}, {8, 5}},
      {{2}, {1000}, {3}, {2, 5, 8}},
      {{-3}, {-1}, {1}, {7, 8}},
      {{100}, {-100}, {-4}, {9, 5, 1}},
      {{5}, {5}, {1}, {}},
      {{-100}, {-200}, {-1}, {0}},
  };
  for (const Case& c : cases) {
    const auto out = run(OpId::slice, {&x}, {{"starts", c.starts}, {"ends", c.ends}, {"steps", c.steps}});
    expectClose(out[0], c.expected, 0, 0, "slice " + shapeStr(c.starts) + ":" + shapeStr(c.ends) + ":" + shapeStr(c.steps));
  }
}

TEST(CpuKernels, SliceOfSeveralAxes) {
  std::mt19937 rng(14);
  const Shape shape = {4, 5, 6};
  const HostTensor x = randomTensor(DType::kF32, shape, rng);
  const auto out = run(OpId::slice, {&x},
                       {{"starts", Ints{-1, 1}}, {"ends", Ints{0, 6}}, {"axes", Ints{2, 0}}, {"steps", Ints{-2, 2}}});
  ASSERT_EQ(out[0].type.shape, (Shape{2, 5, 3}));
  std::vector<double> expected;
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    const auto index = unravel(i, {2, 5, 3});
    expected.push_back(x.at(broadcastOffset({1 + 2 * index[0], index[1], 5 - 2 * index[2]}, shape)));
  }
  expectClose(out[0], expected, 0, 0, "slice of axes 2 and 0");
}

TEST(CpuKernels, GatherAlongAxesWithNegativeIndices) {
  std::mt19937 rng(15);
  const Shape data_shape = {3, 5, 4};
  const HostTensor data = randomTensor(DType::kF64, data_shape, rng);
  for (DType index_type : {DType::kI64, DType::kI32}) {
    const HostTensor indices = makeTensor(index_type, {2, 3}, {0, -1, 2, 4, 4, -5});
    for (int64_t axis : {1, -2}) {
      const auto out = run(OpId::gather, {&data, &indices}, {{"axis", axis}});
      ASSERT_EQ(out[0].type.shape, (Shape{3, 2, 3, 4}));
      std::vector<double> expected;
      for (int64_t i = 0; i < out[0].numel(); ++i) {
        const auto index = unravel(i, {3, 2, 3, 4});
        int64_t row = static_cast<int64_t>(indices.at(index[1] * 3 + index[2]));
        if (row < 0) row += 5;
        expected.push_back(data.at(broadcastOffset({index[0], row, index[3]}, data_shape)));
      }
      expectClose(out[0], expected, 0, 0, "gather " + indices.type.str());
    }
  }
  const HostTensor rows = makeTensor(DType::kI64, {2}, {2, 0});
  const auto first_axis = run(OpId::gather, {&data, &rows}, {{"axis", int64_t{0}}});
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(first_axis[0].at(i), data.at(40 + i));
}

TEST(CpuKernels, GatherIndexOutOfRangeIsAnError) {
  const HostTensor data(TensorType{DType::kF32, {5, 2}});
  const HostTensor indices = makeTensor(DType::kI32, {3}, {0, 7, 1});
  auto result = runKernel(OpId::gather, {&data, &indices}, {});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(result.status().message().find("gather: index 7"), std::string::npos) << result.status().message();
  const HostTensor too_negative = makeTensor(DType::kI64, {1}, {-6});
  EXPECT_FALSE(runKernel(OpId::gather, {&data, &too_negative}, {}));
}

TEST(CpuKernels, ExpandTriluAndConstant) {
  const HostTensor x = makeTensor(DType::kF32, {3, 1}, {1, 2, 3});
  const auto expanded = run(OpId::expand, {&x}, {{"shape", Ints{2, 1, 4}}});
  ASSERT_EQ(expanded[0].type.shape, (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(expanded[0].at(i), 1 + i / 4 % 3);

  std::mt19937 rng(16);
  const HostTensor m = randomTensor(DType::kF64, {2, 4, 5}, rng, 1, 2);
  for (int64_t upper : {0, 1}) {
    for (int64_t k : {-1, 0, 2, -7, 9}) {
      const auto out = run(OpId::trilu, {&m}, {{"upper", upper}, {"k", k}});
      std::vector<double> expected;
      for (int64_t i = 0; i < m.numel(); ++i) {
        const int64_t row = i / 5 % 4, col = i % 5;
        const bool keep = upper ? col - row >= k : col - row <= k;
        expected.push_back(keep ? m.at(i) : 0);
      }
      expectClose(out[0], expected, 0, 0, "trilu upper " + std::to_string(upper) + " k " + std::to_string(k));
    }
  }

  auto value = std::make_shared<TensorData>();
  value->type = TensorType{DType::kI32, {2, 2}};
  const int32_t numbers[4] = {5, -6, 7, 8};
  value->bytes.resize(16);
  std::memcpy(value->bytes.data(), numbers, 16);
  const auto constant = run(OpId::constant, {}, {{"value", std::shared_ptr<const TensorData>(value)}});
  expectClose(constant[0], {5, -6, 7, 8}, 0, 0, "constant");
}

// ---- Losses ----

// Mean over rows whose label is not ignore_index of log Σ exp(row) − row[label], in double.
double referenceCrossEntropy(const HostTensor& logits, const HostTensor& labels, int64_t ignore_index) {
  const int64_t classes = logits.type.shape.back();
  double sum = 0;
  int count = 0;
  for (int64_t r = 0; r < labels.numel(); ++r) {
    if (labels.at(r) == ignore_index) continue;
    double max = -INFINITY, exp_sum = 0;
    for (int64_t c = 0; c < classes; ++c) max = std::max(max, logits.at(r * classes + c));
    for (int64_t c = 0; c < classes; ++c) exp_sum += std::exp(logits.at(r * classes + c) - max);
    sum += std::log(exp_sum) + max - logits.at(r * classes + static_cast<int64_t>(labels.at(r)));
    ++count;
  }
  return sum / count;
}

TEST(CpuKernels, SoftmaxCrossEntropyMatchesReference) {
  std::mt19937 rng(17);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (DType label_type : {DType::kI64, DType::kI32}) {
      HostTensor logits = randomTensor(dtype, {2, 3, 5}, rng, -4, 4);
      logits.set(0, 500);  // stable for large logits
      const HostTensor labels = makeTensor(label_type, {2, 3}, {0, 4, -100, 2, 2, 1});
      const auto out = run(OpId::softmax_cross_entropy, {&logits, &labels});
      ASSERT_EQ(out[0].type, (TensorType{DType::kF32, {}}));
      expectClose(out[0], {referenceCrossEntropy(logits, labels, -100)}, 1e-6, 0,
                  "softmax_cross_entropy " + logits.type.str());
      const HostTensor other_labels = makeTensor(label_type, {2, 3}, {0, 4, 2, 2, 2, 1});
      const auto custom = run(OpId::softmax_cross_entropy, {&logits, &other_labels}, {{"ignore_index", int64_t{2}}});
      expectClose(custom[0], {referenceCrossEntropy(logits, other_labels, 2)}, 1e-6, 0, "ignore_index 2");
    }
  }
}

TEST(CpuKernels, SoftmaxCrossEntropyLabelErrorsAndAllIgnored) {
  const HostTensor logits(TensorType{DType::kF32, {3, 4}});
  const HostTensor bad = makeTensor(DType::kI64, {3}, {1, 4, 0});
  auto result = runKernel(OpId::softmax_cross_entropy, {&logits, &bad}, {});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(result.status().message().find("softmax_cross_entropy: label 4 at position 1 is out of range [0, 4)"),
            std::string::npos)
      << result.status().message();
  const HostTensor negative = makeTensor(DType::kI32, {3}, {-1, 0, 0});
  EXPECT_FALSE(runKernel(OpId::softmax_cross_entropy, {&logits, &negative}, {}));
  const HostTensor ignored = makeTensor(DType::kI64, {3}, {-100, -100, -100});
  EXPECT_TRUE(std::isnan(run(OpId::softmax_cross_entropy, {&logits, &ignored})[0].at(0)));
}

TEST(CpuKernels, MeanSquaredError) {
  std::mt19937 rng(18);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const HostTensor p = randomTensor(dtype, {7, 3}, rng), t = randomTensor(dtype, {7, 3}, rng);
    double sum = 0;
    for (int64_t i = 0; i < 21; ++i) sum += std::pow(p.at(i) - t.at(i), 2);
    expectClose(run(OpId::mse, {&p, &t})[0], {sum / 21}, 1e-6, 0, "mse " + p.type.str());
  }
}

// ---- Results do not depend on the thread count (large inputs take the parallel paths) ----

TEST(CpuKernels, ParallelResultsEqualSerialResults) {
  std::mt19937 rng(19);
  const HostTensor big = randomTensor(DType::kF32, {300, 257}, rng, -3, 3);
  const HostTensor row = randomTensor(DType::kF32, {257}, rng);
  const HostTensor column = randomTensor(DType::kF32, {300, 1}, rng);
  const HostTensor labels = randomIntTensor(DType::kI64, {300}, rng, 0, 256);
  const HostTensor scale = randomTensor(DType::kF32, {257}, rng);
  struct Case {
    OpId op;
    std::vector<const HostTensor*> operands;
    AttrMap attributes;
  };
  const std::vector<Case> cases = {
      {OpId::add, {&big, &row}, {}},
      {OpId::mul, {&column, &big}, {}},
      {OpId::exp, {&big}, {}},
      {OpId::reduce_sum, {&big}, {{"axes", Ints{0}}}},
      {OpId::reduce_mean, {&big}, {{"axes", Ints{1}}}},
      {OpId::reduce_max, {&big}, {}},
      {OpId::softmax, {&big}, {}},
      {OpId::log_softmax, {&big}, {{"axis", int64_t{0}}}},
      {OpId::layer_norm, {&big, &scale}, {}},
      {OpId::transpose, {&big}, {}},
      {OpId::softmax_cross_entropy, {&big, &labels}, {}},
      {OpId::mse, {&big, &big}, {}},
      {OpId::cast, {&big}, {{"to", std::string("f64")}}},
  };
  for (const Case& c : cases) {
    const auto serial = run(c.op, c.operands, c.attributes, 1);
    const auto parallel = run(c.op, c.operands, c.attributes, 4);
    ASSERT_EQ(serial.size(), parallel.size());
    for (size_t i = 0; i < serial.size(); ++i) expectIdentical(serial[i], parallel[i], std::string(opName(c.op)));
  }
}

}  // namespace
}  // namespace cleave::runtime::kernel_test
