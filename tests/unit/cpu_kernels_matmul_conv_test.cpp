// Tests of the CPU kernels of matmul, gemm, conv2d and the pools against naive references (double
// accumulation) and values PyTorch computes.
#include <cblas.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/unit/cpu_kernel_test_support.h"

namespace cleave::runtime::kernel_test {
namespace {

using Ints = std::vector<int64_t>;

// ---- matmul, gemm ----

// op(x)[i][j] of the matrix at `offset` of a row-major tensor whose last two dims are rows × cols.
double matrixAt(const HostTensor& x, int64_t offset, int64_t cols, bool transposed, int64_t i, int64_t j) {
  return transposed ? x.at(offset + j * cols + i) : x.at(offset + i * cols + j);
}

TEST(CpuKernelsMatmul, BatchedBroadcastingWithTransposes) {
  std::mt19937 rng(21);
  struct Case {
    Shape a, b;  // as stored (before the transposes)
  };
  const std::vector<Case> cases = {
      {{2, 1, 3, 4}, {5, 4, 6}},  // batch broadcast both ways
      {{3, 4, 5}, {5, 6}},        // one b: the batch folds into m
      {{4, 5}, {3, 5, 6}},        // one a
      {{1, 7, 3}, {2, 3, 2}},     // size-1 batch dim
      {{9, 1}, {1, 8}},           // k = 1
      {{2, 3, 4}, {2, 4, 5}},
  };
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    for (const Case& c : cases) {
      for (int64_t ta : {0, 1}) {
        for (int64_t tb : {0, 1}) {
          Shape a_shape = c.a, b_shape = c.b;
          if (ta) std::swap(a_shape[a_shape.size() - 1], a_shape[a_shape.size() - 2]);
          if (tb) std::swap(b_shape[b_shape.size() - 1], b_shape[b_shape.size() - 2]);
          const bool integer = dtype == DType::kI32 || dtype == DType::kI64;
          const HostTensor a = integer ? randomIntTensor(dtype, a_shape, rng, -9, 9) : randomTensor(dtype, a_shape, rng);
          const HostTensor b = integer ? randomIntTensor(dtype, b_shape, rng, -9, 9) : randomTensor(dtype, b_shape, rng);
          const auto out = run(OpId::matmul, {&a, &b}, {{"transpose_a", ta}, {"transpose_b", tb}});
          ASSERT_EQ(out.size(), 1u);
          const Shape& o = out[0].type.shape;
          const int64_t m = o[o.size() - 2], n = o[o.size() - 1];
          const int64_t k = c.a.back();
          const Shape batch(o.begin(), o.end() - 2);
          const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
          std::vector<double> expected;
          for (int64_t i = 0; i < out[0].numel(); ++i) {
            const auto index = unravel(i, o);
            const std::vector<int64_t> batch_index(index.begin(), index.end() - 2);
            const int64_t a_offset = broadcastOffset(batch_index, a_batch) * m * k;
            const int64_t b_offset = broadcastOffset(batch_index, b_batch) * k * n;
            double sum = 0;
            for (int64_t p = 0; p < k; ++p)
              sum += matrixAt(a, a_offset, a_shape.back(), ta, index[index.size() - 2], p) *
                     matrixAt(b, b_offset, b_shape.back(), tb, p, index.back());
            expected.push_back(sum);
          }
          expectClose(out[0], expected, dtype == DType::kF32 ? 1e-5 : 1e-13, 1e-6,
                      "matmul " + a.type.str() + " " + b.type.str() + " ta " + std::to_string(ta) + " tb " +
                          std::to_string(tb));
        }
      }
    }
  }
}

TEST(CpuKernelsMatmul, EmptySumGivesZerosAndManySmallProductsRunInParallel) {
  const HostTensor a(TensorType{DType::kF32, {2, 0}}), b(TensorType{DType::kF32, {0, 3}});
  expectClose(run(OpId::matmul, {&a, &b})[0], std::vector<double>(6, 0.0), 0, 0, "k = 0");
  std::mt19937 rng(22);
  const HostTensor q = randomTensor(DType::kF32, {2, 32, 16, 8}, rng), k = randomTensor(DType::kF32, {2, 32, 16, 8}, rng);
  const AttrMap transpose_b = {{"transpose_b", int64_t{1}}};
  expectIdentical(run(OpId::matmul, {&q, &k}, transpose_b, 1)[0], run(OpId::matmul, {&q, &k}, transpose_b, 4)[0],
                  "batched matmul");
}

// Products large enough to be split across threads, by rows (m > n) or by columns, with transposes.
TEST(CpuKernelsMatmul, ProductsSplitAcrossThreadsMatchReference) {
  std::mt19937 rng(28);
  const int64_t k = 96;
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{200, 150}, {150, 200}}) {
    for (int64_t ta : {0, 1}) {
      for (int64_t tb : {0, 1}) {
        const HostTensor a = randomTensor(DType::kF64, ta ? Shape{k, m} : Shape{m, k}, rng);
        const HostTensor b = randomTensor(DType::kF64, tb ? Shape{n, k} : Shape{k, n}, rng);
        const auto out = run(OpId::matmul, {&a, &b}, {{"transpose_a", ta}, {"transpose_b", tb}}, 4);
        std::vector<double> expected;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t p = 0; p < k; ++p)
              sum += matrixAt(a, 0, a.type.shape[1], ta, i, p) * matrixAt(b, 0, b.type.shape[1], tb, p, j);
            expected.push_back(sum);
          }
        expectClose(out[0], expected, 1e-12, 1e-12,
                    "matmul " + a.type.str() + " " + b.type.str() + " on 4 threads");
      }
    }
  }
}

TEST(CpuKernelsMatmul, GemmScalesAndAddsBroadcastC) {
  std::mt19937 rng(23);
  const int64_t m = 5, k = 4, n = 3;
  const std::vector<Shape> c_shapes = {{}, {n}, {m, 1}, {m, n}, {1, n}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI64}) {
    const bool integer = dtype == DType::kI64;
    for (int64_t ta : {0, 1}) {
      for (int64_t tb : {0, 1}) {
        const HostTensor a = integer ? randomIntTensor(dtype, ta ? Shape{k, m} : Shape{m, k}, rng, -5, 5)
                                     : randomTensor(dtype, ta ? Shape{k, m} : Shape{m, k}, rng);
        const HostTensor b = integer ? randomIntTensor(dtype, tb ? Shape{n, k} : Shape{k, n}, rng, -5, 5)
                                     : randomTensor(dtype, tb ? Shape{n, k} : Shape{k, n}, rng);
        const double alpha = integer ? 3 : 0.75, beta = integer ? -2 : 1.5;
        for (const Shape& c_shape : c_shapes) {
          for (bool with_c : {false, true}) {
            const HostTensor c = integer ? randomIntTensor(dtype, c_shape, rng, -5, 5) : randomTensor(dtype, c_shape, rng);
            std::vector<const HostTensor*> operands = {&a, &b};
            if (with_c) operands.push_back(&c);
            const auto out = run(OpId::gemm, operands,
                                 {{"alpha", alpha}, {"beta", beta}, {"transpose_a", ta}, {"transpose_b", tb}});
            std::vector<double> expected;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (int64_t p = 0; p < k; ++p)
                  sum += matrixAt(a, 0, a.type.shape[1], ta, i, p) * matrixAt(b, 0, b.type.shape[1], tb, p, j);
                expected.push_back(alpha * sum + (with_c ? beta * c.at(broadcastOffset({i, j}, c_shape)) : 0));
              }
            expectClose(out[0], expected, dtype == DType::kF32 ? 1e-5 : 1e-13, 1e-6,
                        "gemm " + a.type.str() + (with_c ? " with c " + c.type.str() : ""));
          }
        }
      }
    }
  }
}

// ---- conv2d ----

struct ConvCase {
  int64_t batch, channels, height, width, out_channels, kernel_h, kernel_w;
  Ints strides, pads, dilations;
  int64_t groups;
  bool bias;
};

const std::vector<ConvCase>& convCases() {
  static const std::vector<ConvCase> cases = {
      {2, 3, 7, 6, 4, 3, 2, {2, 1}, {1, 0, 2, 1}, {1, 2}, 1, true},  // strides, asymmetric pads, dilation
      {2, 4, 6, 5, 6, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, false},  // groups
      {3, 5, 7, 7, 5, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 5, true},   // depthwise
      {2, 3, 5, 6, 6, 2, 3, {1, 2}, {0, 1, 1, 0}, {2, 1}, 3, true},   // depthwise with a channel multiplier
      {2, 1, 9, 8, 4, 5, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1, true},   // one input channel
      {2, 6, 4, 5, 3, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},   // 1x1
      {2, 6, 4, 5, 6, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3, false},  // grouped 1x1
      {3, 2, 5, 5, 3, 1, 1, {2, 2}, {1, 0, 0, 1}, {1, 1}, 1, false},  // 1x1 with stride and padding
      {2, 16, 32, 32, 4, 5, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1, true},  // a large image
      {2, 3, 6, 7, 9, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1, true},    // width-keeping with dilation
      {1, 2, 5, 6, 9, 4, 4, {1, 1}, {2, 1, 1, 2}, {1, 1}, 1, false},   // width-keeping, even kernel, asymmetric pads
      {2, 2, 4, 3, 8, 1, 7, {1, 1}, {0, 3, 0, 3}, {1, 1}, 1, false},   // kernel wider than the image
      {2, 4, 1, 1, 3, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},    // 1x1 image, padded 3x3 (ResNet's last stage)
      {1, 2, 2, 1, 3, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, false},   // rows of padding wider than the image
  };
  return cases;
}

AttrMap convAttrs(const ConvCase& c) {
  return {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"groups", c.groups}};
}

// Naive conv2d in double.
std::vector<double> referenceConv(const ConvCase& c, const HostTensor& x, const HostTensor& w, const HostTensor* b,
                                  const Shape& out_shape) {
  const int64_t cg = c.channels / c.groups, og = c.out_channels / c.groups;
  std::vector<double> y;
  for (int64_t i = 0; i < out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]; ++i) {
    const auto idx = unravel(i, out_shape);  // n, o, oh, ow
    const int64_t g = idx[1] / og;
    double sum = b ? b->at(idx[1]) : 0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t ki = 0; ki < c.kernel_h; ++ki)
        for (int64_t kj = 0; kj < c.kernel_w; ++kj) {
          const int64_t ih = idx[2] * c.strides[0] - c.pads[0] + ki * c.dilations[0];
          const int64_t iw = idx[3] * c.strides[1] - c.pads[1] + kj * c.dilations[1];
          if (ih < 0 || ih >= c.height || iw < 0 || iw >= c.width) continue;
          sum += x.at(((idx[0] * c.channels + g * cg + ci) * c.height + ih) * c.width + iw) *
                 w.at(((idx[1] * cg + ci) * c.kernel_h + ki) * c.kernel_w + kj);
        }
    y.push_back(sum);
  }
  return y;
}

TEST(CpuKernelsConv, Conv2dMatchesNaiveReference) {
  std::mt19937 rng(24);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const ConvCase& c : convCases()) {
      const HostTensor x = randomTensor(dtype, {c.batch, c.channels, c.height, c.width}, rng);
      const HostTensor w = randomTensor(dtype, {c.out_channels, c.channels / c.groups, c.kernel_h, c.kernel_w}, rng);
      const HostTensor b = randomTensor(dtype, {c.out_channels}, rng);
      std::vector<const HostTensor*> operands = {&x, &w};
      if (c.bias) operands.push_back(&b);
      const auto out = run(OpId::conv2d, operands, convAttrs(c));
      ASSERT_EQ(out.size(), 1u);
      expectClose(out[0], referenceConv(c, x, w, c.bias ? &b : nullptr, out[0].type.shape),
                  dtype == DType::kF32 ? 1e-5 : 1e-13, 1e-5, "conv2d " + x.type.str() + " w " + w.type.str());
    }
  }
}

TEST(CpuKernelsConv, Conv2dIsThreadCountIndependent) {
  std::mt19937 rng(25);
  const HostTensor x = randomTensor(DType::kF32, {8, 8, 14, 14}, rng), w = randomTensor(DType::kF32, {16, 8, 3, 3}, rng);
  const AttrMap a = {{"pads", Ints{1, 1, 1, 1}}};
  expectIdentical(run(OpId::conv2d, {&x, &w}, a, 1)[0], run(OpId::conv2d, {&x, &w}, a, 4)[0], "conv2d");
  const HostTensor dw = randomTensor(DType::kF32, {8, 1, 3, 3}, rng);
  const AttrMap depthwise = {{"pads", Ints{1, 1, 1, 1}}, {"groups", int64_t{8}}};
  expectIdentical(run(OpId::conv2d, {&x, &dw}, depthwise, 1)[0], run(OpId::conv2d, {&x, &dw}, depthwise, 4)[0],
                  "depthwise conv2d");
}

// Callers should leave OpenBLAS single-threaded (the kernel table sets it); if one raises its
// thread count, the kernels call it from one thread and still compute the same products.
TEST(CpuKernelsConv, KernelsStayCorrectWhenOpenBlasIsThreaded) {
  std::mt19937 rng(29);
  const HostTensor x = randomTensor(DType::kF64, {6, 4, 9, 9}, rng), w = randomTensor(DType::kF64, {8, 4, 3, 3}, rng);
  const HostTensor a = randomTensor(DType::kF64, {3, 130, 70}, rng), b = randomTensor(DType::kF64, {3, 70, 90}, rng);
  const AttrMap pads = {{"pads", Ints{1, 1, 1, 1}}};
  const HostTensor conv_single = run(OpId::conv2d, {&x, &w}, pads, 4)[0];
  const HostTensor matmul_single = run(OpId::matmul, {&a, &b}, {}, 4)[0];
  openblas_set_num_threads(2);
  const HostTensor conv_threaded = run(OpId::conv2d, {&x, &w}, pads, 4)[0];
  const HostTensor matmul_threaded = run(OpId::matmul, {&a, &b}, {}, 4)[0];
  openblas_set_num_threads(1);
  expectClose(conv_threaded, conv_single.values(), 1e-12, 1e-12, "conv2d with threaded OpenBLAS");
  expectClose(matmul_threaded, matmul_single.values(), 1e-12, 1e-12, "matmul with threaded OpenBLAS");
}

// ---- Pools ----

// Naive pools with PyTorch's rules: windows clipped to the image; avg divides by the window's part
// inside the padded image (count_include_pad) or inside the image.
std::vector<double> referencePool(bool max, const HostTensor& x, const Shape& out_shape, const Ints& kernel,
                                  const Ints& strides, const Ints& pads, bool count_include_pad) {
  const int64_t h = x.type.shape[2], w = x.type.shape[3];
  std::vector<double> y;
  for (int64_t i = 0; i < out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]; ++i) {
    const auto idx = unravel(i, out_shape);
    const int64_t h0 = idx[2] * strides[0] - pads[0], w0 = idx[3] * strides[1] - pads[1];
    const int64_t h1 = std::min(h0 + kernel[0], h + pads[2]), w1 = std::min(w0 + kernel[1], w + pads[3]);
    double result = max ? -INFINITY : 0;
    int64_t inside = 0;
    for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h1, h); ++ih)
      for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w1, w); ++iw) {
        const double v = x.at(((idx[0] * x.type.shape[1] + idx[1]) * h + ih) * w + iw);
        result = max ? std::max(result, v) : result + v;
        ++inside;
      }
    if (!max) result /= static_cast<double>(count_include_pad ? (h1 - h0) * (w1 - w0) : inside);
    y.push_back(result);
  }
  return y;
}

struct PoolCase {
  Shape input;
  Ints kernel, strides, pads;
  int64_t ceil_mode;
};

const std::vector<PoolCase>& poolCases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {}, {0, 0, 0, 0}, 0},      // strides default to the kernel
      {{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},  // ceil_mode with padding
      {{2, 1, 6, 7}, {3, 2}, {2, 3}, {1, 0, 0, 1}, 1},  // asymmetric pads
      {{1, 2, 5, 5}, {2, 3}, {1, 1}, {1, 1, 0, 1}, 0},
  };
  return cases;
}

AttrMap poolAttrs(const PoolCase& c, int64_t count_include_pad = 0) {
  AttrMap a = {{"kernel", c.kernel}, {"pads", c.pads}, {"ceil_mode", c.ceil_mode}, {"count_include_pad", count_include_pad}};
  if (!c.strides.empty()) a["strides"] = c.strides;
  return a;
}

TEST(CpuKernelsPool, MaxAndAvgPoolMatchReference) {
  std::mt19937 rng(26);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const PoolCase& c : poolCases()) {
      const HostTensor x = randomTensor(dtype, c.input, rng);
      const Ints strides = c.strides.empty() ? c.kernel : c.strides;
      const auto max = run(OpId::max_pool2d, {&x}, poolAttrs(c));
      expectClose(max[0], referencePool(true, x, max[0].type.shape, c.kernel, strides, c.pads, false), 0, 0,
                  "max_pool2d " + x.type.str());
      for (int64_t count_include_pad : {0, 1}) {
        const auto avg = run(OpId::avg_pool2d, {&x}, poolAttrs(c, count_include_pad));
        expectClose(avg[0],
                    referencePool(false, x, avg[0].type.shape, c.kernel, strides, c.pads, count_include_pad != 0),
                    dtype == DType::kF32 ? 1e-6 : 1e-14, 1e-7, "avg_pool2d " + x.type.str());
      }
    }
  }
}

// Values from PyTorch 1.13: x = arange(1, 36) as [1,1,5,7] with x[0,0,2,3] = -50, kernel (3,2),
// stride (2,3), padding 1, ceil_mode=True.
TEST(CpuKernelsPool, PoolsMatchPyTorchWithCeilModeAndPadding) {
  std::vector<double> values;
  for (int i = 1; i <= 35; ++i) values.push_back(i);
  values[2 * 7 + 3] = -50;
  const HostTensor x = makeTensor(DType::kF32, {1, 1, 5, 7}, values);
  const PoolCase c = {{1, 1, 5, 7}, {3, 2}, {2, 3}, {1, 1, 1, 1}, 1};
  expectClose(run(OpId::avg_pool2d, {&x}, poolAttrs(c, 1))[0],
              {1.5, 4.666667, 6.666667, 7.5, 6.166667, 20.5, 8.5, 18.666666, 20.666666}, 1e-6, 0,
              "avg_pool2d count_include_pad");
  expectClose(run(OpId::avg_pool2d, {&x}, poolAttrs(c, 0))[0], {4.5, 7.0, 10.0, 15.0, 6.166667, 20.5, 25.5, 28.0, 31.0},
              1e-6, 0, "avg_pool2d");
  std::vector<double> negated;
  for (double v : values) negated.push_back(-v);
  const HostTensor y = makeTensor(DType::kF32, {1, 1, 5, 7}, negated);
  expectClose(run(OpId::max_pool2d, {&y}, poolAttrs(c))[0], {-1, -3, -6, -8, 50, -13, -22, -24, -27}, 0, 0, "max_pool2d");
}

TEST(CpuKernelsPool, MaxPoolPropagatesNaNAndGlobalAvgPool) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor x = makeTensor(DType::kF64, {1, 1, 2, 4}, {1, nan, 3, 4, 5, 6, 7, 8});
  expectClose(run(OpId::max_pool2d, {&x}, {{"kernel", Ints{2, 2}}})[0], {nan, 8}, 0, 0, "max NaN");
  std::mt19937 rng(27);
  const HostTensor images = randomTensor(DType::kF32, {3, 4, 5, 6}, rng);
  std::vector<double> expected;
  for (int64_t plane = 0; plane < 12; ++plane) {
    double sum = 0;
    for (int64_t i = 0; i < 30; ++i) sum += images.at(plane * 30 + i);
    expected.push_back(sum / 30);
  }
  const auto out = run(OpId::global_avg_pool, {&images});
  ASSERT_EQ(out[0].type.shape, (Shape{3, 4, 1, 1}));
  expectClose(out[0], expected, 1e-6, 0, "global_avg_pool");
}

}  // namespace
}  // namespace cleave::runtime::kernel_test
