// CPU kernels of the gradient ops not kept with their forward op's family: activation gradients
// (relu, gelu, tanh, sigmoid), softmax and log_softmax gradients, layer_norm_grad, rms_norm_grad, gather_grad,
// slice_grad and softmax_cross_entropy_grad. (Convolution and pooling gradients live with their
// forward kernels.) Results may alias same-shaped operands.
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element (for parallelFor) of plain arithmetic and of a transcendental function.
constexpr int64_t kSimpleWork = 2;
constexpr int64_t kTranscendentalWork = 24;

// dx = fn(dy, v) elementwise, v being the forward op's input or result.
template <class T, class Fn>
void mapGradient(const KernelCall& call, int64_t work_per_element, Fn fn) {
  const T* dy = call.in<T>(0);
  const T* v = call.in<T>(1);
  T* dx = call.out<T>(0);
  parallelFor(call.op.results[0].numel(), threadCount(call), work_per_element, [&](int64_t begin, int64_t end) {
    // Local copies: a loop that reloads its pointers or function object from the closure is not
    // vectorised.
    const T* grad = dy;
    const T* value = v;
    T* out = dx;
    const Fn f = fn;
    withWidestVectors([&] {
      for (int64_t i = begin; i < end; ++i) out[i] = f(grad[i], value[i]);
    });
  });
}

// ---- Activation gradients (PyTorch's formulas and operation order) ----

Status reluGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    mapGradient<T>(call, kSimpleWork, [](T dy, T x) { return x > T{0} ? dy : T{0}; });
    return Status::ok();
  });
}

// gelu'(x) = Φ(x) + x·φ(x) (exact), or the derivative of the tanh approximation.
template <class T>
CLEAVE_INLINE T geluGradExact(T dy, T x) {
  const T cdf = T(0.5) * (T(1) + verf(x * T(std::numbers::sqrt2 / 2)));
  const T pdf = vexp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  return dy * (cdf + x * pdf);
}
template <class T>
CLEAVE_INLINE T geluGradTanh(T dy, T x) {
  const T beta = T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
  const T kappa = T(0.044715);
  const T x_sq = x * x;
  const T inner = beta * (x + kappa * x_sq * x);
  const T tanh_inner = vtanh(inner);
  const T left = T(0.5) * x;
  const T right = T(1) + tanh_inner;
  const T left_derivative = T(0.5) * right;
  const T right_derivative = left * (T(1) - tanh_inner * tanh_inner) * beta * (T(1) + T(3) * kappa * x_sq);
  return dy * (left_derivative + right_derivative);
}

Status geluGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    if (call.op.getString("approximate") == "tanh")
      mapGradient<T>(call, kTranscendentalWork, [](T dy, T x) { return geluGradTanh(dy, x); });
    else
      mapGradient<T>(call, kTranscendentalWork, [](T dy, T x) { return geluGradExact(dy, x); });
    return Status::ok();
  });
}

Status tanhGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    mapGradient<T>(call, kSimpleWork, [](T dy, T y) { return dy * (T(1) - y * y); });
    return Status::ok();
  });
}

Status sigmoidGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    mapGradient<T>(call, kSimpleWork, [](T dy, T y) { return dy * (T(1) - y) * y; });
    return Status::ok();
  });
}

// ---- softmax_grad, log_softmax_grad ----

// One slice along the axis, `length` elements `stride` apart: softmax: dx = y·(dy − Σ dy·y);
// log_softmax: dx = dy − exp(y)·Σ dy. The sums are read before any dx is written.
template <class T, bool kLog>
void softmaxGradSlice(const T* dy, const T* y, T* dx, int64_t length, int64_t stride) {
  const T s = static_cast<T>(sumOf(length, [=](int64_t l) {
    const int64_t i = l * stride;
    if constexpr (kLog) return static_cast<double>(dy[i]);
    else return static_cast<double>(dy[i]) * static_cast<double>(y[i]);
  }));
  for (int64_t l = 0; l < length; ++l) {
    const int64_t i = l * stride;
    if constexpr (kLog) dx[i] = dy[i] - vexp(y[i]) * s;
    else dx[i] = y[i] * (dy[i] - s);
  }
}

template <bool kLog>
Status softmaxGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[0].shape;
    const AxisView view = axisView(shape, normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const T* dy = call.in<T>(0);
    const T* y = call.in<T>(1);
    T* dx = call.out<T>(0);
    // Work items are slices along the axis: (outer, inner) pairs, consecutive inner ones adjacent.
    parallelFor(view.outer * view.inner, threadCount(call), view.length * (kLog ? kTranscendentalWork : kSimpleWork),
                [&](int64_t begin, int64_t end) {
                  withWidestVectors([&] {
                    for (int64_t item = begin; item < end; ++item) {
                      const int64_t offset = item / view.inner * view.length * view.inner + item % view.inner;
                      if (view.inner == 1)  // contiguous slices: a constant stride lets the loops vectorise
                        softmaxGradSlice<T, kLog>(dy + offset, y + offset, dx + offset, view.length, 1);
                      else
                        softmaxGradSlice<T, kLog>(dy + offset, y + offset, dx + offset, view.length, view.inner);
                    }
                  });
                });
    return Status::ok();
  });
}

// ---- layer_norm_grad ----

// With x̂ = (x − mean)·rstd and g = dy·scale per row:
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),  dscale = Σ_rows dy·x̂,  dbias = Σ_rows dy.
// dscale and dbias are summed per fixed block of rows, then over blocks in order, so the result
// does not depend on the thread count.
Status layerNormGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[1].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t rows = dimsProduct(shape, 0, axis), cols = dimsProduct(shape, axis, shape.size());
    const double epsilon = call.op.getFloat("epsilon");
    const T* dy = call.in<T>(0);
    const T* x = call.in<T>(1);
    const T* scale = call.in<T>(2);
    T* dx = call.out<T>(0);
    T* dscale = call.out<T>(1);
    T* dbias = call.out<T>(2);
    if (cols == 0) return Status::ok();
    constexpr int64_t kMaxBlocks = 64;
    const int64_t rows_per_block = std::max<int64_t>(1, (rows + kMaxBlocks - 1) / kMaxBlocks);
    const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    // partial[b] holds block b's Σ dy·x̂ (cols values) then Σ dy (cols values).
    std::vector<double> partial(static_cast<size_t>(blocks * 2 * cols), 0.0);
    parallelFor(blocks, threadCount(call), rows_per_block * cols * 12, [&](int64_t first, int64_t last) {
      withWidestVectors([&] {
        for (int64_t b = first; b < last; ++b) {
          double* dscale_sum = partial.data() + b * 2 * cols;
          double* dbias_sum = dscale_sum + cols;
          for (int64_t r = b * rows_per_block; r < std::min(rows, (b + 1) * rows_per_block); ++r) {
            const T* xr = x + r * cols;
            const T* dyr = dy + r * cols;
            T* dxr = dx + r * cols;
            const auto [mean, rstd] = rowMoments(xr, cols, epsilon);
            // Elementwise math in T, sums in double; x̂ and g recomputed in each loop keep every
            // loop a simple, vectorisable one.
            const T mean_t = static_cast<T>(mean), rstd_t = static_cast<T>(rstd);
            auto xhat = [=](int64_t i) { return (xr[i] - mean_t) * rstd_t; };
            auto g = [=](int64_t i) { return dyr[i] * scale[i]; };
            for (int64_t i = 0; i < cols; ++i) {
              dscale_sum[i] += static_cast<double>(dyr[i] * xhat(i));
              dbias_sum[i] += static_cast<double>(dyr[i]);
            }
            const T g_mean = static_cast<T>(sumOf(cols, g) / static_cast<double>(cols));
            const T g_xhat_mean =
                static_cast<T>(sumOf(cols, [=](int64_t i) { return g(i) * xhat(i); }) / static_cast<double>(cols));
            for (int64_t i = 0; i < cols; ++i) dxr[i] = rstd_t * (g(i) - g_mean - xhat(i) * g_xhat_mean);
          }
        }
      });
    });
    for (int64_t i = 0; i < cols; ++i) {
      double dscale_total = 0, dbias_total = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        dscale_total += partial[b * 2 * cols + i];
        dbias_total += partial[b * 2 * cols + cols + i];
      }
      dscale[i] = static_cast<T>(dscale_total);
      dbias[i] = static_cast<T>(dbias_total);
    }
    return Status::ok();
  });
}

// ---- rms_norm_grad ----

// With rstd = 1/sqrt(mean(x²) + epsilon), x̂ = x·rstd and g = dy·scale per row:
//   dx = rstd·(g − x̂·mean(g·x̂)),  dscale = Σ_rows dy·x̂,
// dscale summed per fixed block of rows, then over blocks in order (as layer_norm_grad's).
Status rmsNormGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[1].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t rows = dimsProduct(shape, 0, axis), cols = dimsProduct(shape, axis, shape.size());
    const double epsilon = call.op.getFloat("epsilon");
    const T* dy = call.in<T>(0);
    const T* x = call.in<T>(1);
    const T* scale = call.in<T>(2);
    T* dx = call.out<T>(0);
    T* dscale = call.out<T>(1);
    if (cols == 0) return Status::ok();
    constexpr int64_t kMaxBlocks = 64;
    const int64_t rows_per_block = std::max<int64_t>(1, (rows + kMaxBlocks - 1) / kMaxBlocks);
    const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    std::vector<double> partial(static_cast<size_t>(blocks * cols), 0.0);  // block b's Σ dy·x̂
    parallelFor(blocks, threadCount(call), rows_per_block * cols * 8, [&](int64_t first, int64_t last) {
      withWidestVectors([&] {
        for (int64_t b = first; b < last; ++b) {
          double* dscale_sum = partial.data() + b * cols;
          for (int64_t r = b * rows_per_block; r < std::min(rows, (b + 1) * rows_per_block); ++r) {
            const T* xr = x + r * cols;
            const T* dyr = dy + r * cols;
            T* dxr = dx + r * cols;
            const T rstd = static_cast<T>(rowRmsReciprocal(xr, cols, epsilon));
            auto xhat = [=](int64_t i) { return xr[i] * rstd; };
            auto g = [=](int64_t i) { return dyr[i] * scale[i]; };
            for (int64_t i = 0; i < cols; ++i) dscale_sum[i] += static_cast<double>(dyr[i] * xhat(i));
            const T g_xhat_mean =
                static_cast<T>(sumOf(cols, [=](int64_t i) { return g(i) * xhat(i); }) / static_cast<double>(cols));
            for (int64_t i = 0; i < cols; ++i) dxr[i] = rstd * (g(i) - xhat(i) * g_xhat_mean);
          }
        }
      });
    });
    for (int64_t i = 0; i < cols; ++i) {
      double total = 0;
      for (int64_t b = 0; b < blocks; ++b) total += partial[b * cols + i];
      dscale[i] = static_cast<T>(total);
    }
    return Status::ok();
  });
}

// ---- gather_grad ----

// dx = zeros of data_shape; dx[o, indices[j], k] += dy[o, j, k] (indices checked first; negative
// ones count from the end). Each (o, k) element adds its dy values in index order.
Status gatherGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const Shape& data_shape = call.op.results[0].shape;
      const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
      const AxisView view = axisView(data_shape, axis);
      const int64_t count = call.op.operands[1].numel();
      const I* indices = call.in<I>(1);
      const T* dy = call.in<T>(0);
      T* dx = call.out<T>(0);
      // 1. Check every index before writing anything.
      for (int64_t j = 0; j < count; ++j) {
        const int64_t index = indices[j];
        if (index < -view.length || index >= view.length)
          return Status::badInput("gather_grad: index " + std::to_string(index) + " (element " + std::to_string(j) +
                                  " of the indices) is out of range for axis " + std::to_string(axis) + " of size " +
                                  std::to_string(view.length));
      }
      // 2. Zero dx, then add rows. Work items are (outer, block of inner columns), so each thread
      //    owns its part of dx.
      std::memset(dx, 0, static_cast<size_t>(call.op.results[0].bytes()));
      constexpr int64_t kColumns = 1024;
      const int64_t column_blocks = (view.inner + kColumns - 1) / kColumns;
      parallelFor(view.outer * column_blocks, threadCount(call), count * std::min(view.inner, kColumns),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t item = begin; item < end; ++item) {
                      const int64_t o = item / column_blocks, first = item % column_blocks * kColumns;
                      const int64_t width = std::min(kColumns, view.inner - first);
                      for (int64_t j = 0; j < count; ++j) {
                        int64_t index = indices[j];
                        if (index < 0) index += view.length;
                        const T* from = dy + (o * count + j) * view.inner + first;
                        T* to = dx + (o * view.length + index) * view.inner + first;
                        for (int64_t k = 0; k < width; ++k) to[k] += from[k];
                      }
                    }
                  });
      return Status::ok();
    });
  });
}

// ---- gather_elements_grad ----

// dx = zeros of data_shape; dx[i's coordinates with the axis one replaced by indices[i]] += dy[i],
// in element order on one thread (several elements may add into one place). Indices are checked first.
Status gatherElementsGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const Shape &data_shape = call.op.results[0].shape, &index_shape = call.op.operands[1].shape;
      const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
      const ElementsAddressing addressing(data_shape, index_shape, axis);
      const int64_t n = call.op.operands[1].numel();
      const I* indices = call.in<I>(1);
      for (int64_t i = 0; i < n; ++i)
        if (indices[i] < -addressing.length() || indices[i] >= addressing.length())
          return Status::badInput("gather_elements_grad: index " + std::to_string(indices[i]) + " (element " +
                                  std::to_string(i) + " of the indices) is out of range for axis " + std::to_string(axis) +
                                  " of size " + std::to_string(addressing.length()));
      const T* dy = call.in<T>(0);
      T* dx = call.out<T>(0);
      std::memset(dx, 0, static_cast<size_t>(call.op.results[0].bytes()));
      for (int64_t i = 0; i < n; ++i)
        dx[addressing.offset(i, indices[i] < 0 ? indices[i] + addressing.length() : indices[i])] += dy[i];
      return Status::ok();
    });
  });
}

// ---- gather_nd_grad ----

// dx = zeros of data_shape; each index tuple's slice of dy adds into the slice gather_nd read, in
// tuple order on one thread. Indices are checked first.
Status gatherNdGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const NdAddressing addressing(call.op.results[0].shape, call.op.operands[1].shape, call.op.getInt("batch_dims"));
      const I* indices = call.in<I>(1);
      const T* dy = call.in<T>(0);
      T* dx = call.out<T>(0);
      std::vector<int64_t> offsets(static_cast<size_t>(addressing.rows()));
      for (int64_t row = 0; row < addressing.rows(); ++row) {
        int64_t bad = 0;
        offsets[row] = addressing.offset(row, indices + row * addressing.tupleSize(), bad);
        if (offsets[row] < 0)
          return Status::badInput("gather_nd_grad: index " + std::to_string(indices[row * addressing.tupleSize() + bad]) +
                                  " is out of range for " + call.op.results[0].str());
      }
      std::memset(dx, 0, static_cast<size_t>(call.op.results[0].bytes()));
      for (int64_t row = 0; row < addressing.rows(); ++row)
        for (int64_t e = 0; e < addressing.sliceSize(); ++e) dx[offsets[row] + e] += dy[row * addressing.sliceSize() + e];
      return Status::ok();
    });
  });
}

// ---- slice_grad ----

// dx = zeros of input_shape with dy written where the slice read (each place at most once).
Status sliceGradKernel(const KernelCall& call) {
  const Shape& in = call.op.results[0].shape;
  const Shape& sliced = call.op.operands[0].shape;
  CLEAVE_ASSIGN_OR_RETURN(const std::vector<SliceDim> dims, resolveSliceDims(call, in, sliced));
  std::memset(call.outputs[0], 0, static_cast<size_t>(call.op.results[0].bytes()));
  const int64_t n = call.op.operands[0].numel();
  if (n == 0) return Status::ok();
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
  BroadcastLayout walk{sliced.empty() ? Shape{1} : sliced, {std::vector<int64_t>(std::max<size_t>(1, in.size()), 0)}};
  int64_t base = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    base += dims[d].start * in_strides[d];
    walk.strides[0][d] = dims[d].step * in_strides[d];
  }
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    const E* dy = call.in<E>(0);
    E* dx = call.out<E>(0) + base;
    const int64_t step = walk.strides[0].back();
    parallelFor(n, threadCount(call), 1, [&](int64_t begin, int64_t end) {
      forEachSegment<1>(walk, begin, end, [&](int64_t at, const std::array<int64_t, 1>& to, int64_t length) {
        for (int64_t i = 0; i < length; ++i) dx[to[0] + i * step] = dy[at + i];
      });
    });
    return Status::ok();
  });
}

// ---- softmax_cross_entropy_grad ----

// dlogits = dloss · (softmax(row) − onehot(label)) / count for counted rows; 0 for ignored rows.
Status softmaxCrossEntropyGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[1].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[2].dtype, [&]<class I>(I) -> Status {
      const int64_t classes = call.op.operands[1].shape.back();
      const int64_t rows = call.op.operands[2].numel();
      const int64_t ignore_index = call.op.getInt("ignore_index");
      const double dloss = static_cast<double>(*call.in<float>(0));
      const T* logits = call.in<T>(1);
      const I* labels = call.in<I>(2);
      T* dlogits = call.out<T>(0);
      CLEAVE_ASSIGN_OR_RETURN(const int64_t counted, countLabels(call, labels, rows, classes, ignore_index));
      const T scale = static_cast<T>(counted > 0 ? dloss / static_cast<double>(counted) : 0.0);
      parallelFor(rows, threadCount(call), classes * kTranscendentalWork, [&](int64_t begin, int64_t end) {
        withWidestVectors([&] {
        for (int64_t r = begin; r < end; ++r) {
          const T* row = logits + r * classes;
          T* out = dlogits + r * classes;
          if (labels[r] == ignore_index) {
            std::fill_n(out, classes, T{0});
            continue;
          }
          crossEntropyGradientRow(row, out, classes, static_cast<int64_t>(labels[r]), scale);
        }
        });
      });
      return Status::ok();
    });
  });
}

}  // namespace

void registerGradientKernels(CpuKernelTable& table) {
  auto set = [&](OpId id, CpuKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::relu_grad, reluGradKernel);
  set(OpId::gelu_grad, geluGradKernel);
  set(OpId::tanh_grad, tanhGradKernel);
  set(OpId::sigmoid_grad, sigmoidGradKernel);
  set(OpId::softmax_grad, softmaxGradKernel<false>);
  set(OpId::log_softmax_grad, softmaxGradKernel<true>);
  set(OpId::layer_norm_grad, layerNormGradKernel);
  set(OpId::rms_norm_grad, rmsNormGradKernel);
  set(OpId::gather_grad, gatherGradKernel);
  set(OpId::gather_elements_grad, gatherElementsGradKernel);
  set(OpId::gather_nd_grad, gatherNdGradKernel);
  set(OpId::slice_grad, sliceGradKernel);
  set(OpId::softmax_cross_entropy_grad, softmaxCrossEntropyGradKernel);
}

}  // namespace cleave::runtime::cpu
