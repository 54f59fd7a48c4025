// CPU kernels of the reductions and normalisations: reduce_sum/mean/max, softmax, log_softmax,
// layer_norm, rms_norm and batch_norm. Float sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element (for parallelFor) of a sum and of an exp.
constexpr int64_t kAddWork = 1;
constexpr int64_t kExpWork = 16;

// ---- reduce_sum, reduce_mean, reduce_max ----

// x's dims with size-1 dims dropped and neighbours of the same kind (reduced or kept) merged.
struct ReductionLayout {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
  std::vector<int64_t> strides;  // x's row-major strides of the merged dims
};

ReductionLayout reductionLayout(const KernelCall& call) {
  const Shape& shape = call.op.operands[0].shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const std::vector<int64_t>& axes = call.op.getInts("axes");
  std::vector<bool> is_reduced(shape.size(), axes.empty());
  for (int64_t axis : axes) is_reduced[static_cast<size_t>(normalizeAxis(axis, rank))] = true;
  ReductionLayout layout;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!layout.dims.empty() && layout.reduced.back() == is_reduced[d]) {
      layout.dims.back() *= shape[d];
    } else {
      layout.dims.push_back(shape[d]);
      layout.reduced.push_back(is_reduced[d]);
    }
  }
  layout.strides.assign(layout.dims.size(), 1);
  for (size_t d = layout.dims.size(); d-- > 1;) layout.strides[d - 1] = layout.strides[d] * layout.dims[d];
  return layout;
}

// The x offsets of every index combination of the layout's dims of one kind (reduced or kept),
// leaving out the innermost dim when `skip_last`, in row-major order.
std::vector<int64_t> combinationOffsets(const ReductionLayout& layout, bool reduced, bool skip_last) {
  std::vector<int64_t> offsets = {0};
  const size_t end = layout.dims.size() - (skip_last ? 1 : 0);
  for (size_t d = 0; d < end; ++d) {
    if (layout.reduced[d] != reduced) continue;
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(layout.dims[d]));
    for (int64_t base : offsets)
      for (int64_t i = 0; i < layout.dims[d]; ++i) next.push_back(base + i * layout.strides[d]);
    offsets = std::move(next);
  }
  return offsets;
}

// How a reduction starts, adds one element, and ends.
template <class T, OpId kOp>
struct Reducer {
  // Floats sum in double; integers sum in their own type, wrapping around.
  using Acc = std::conditional_t<kOp == OpId::reduce_max, T, std::conditional_t<std::is_floating_point_v<T>, double, T>>;

  static Acc start() {
    if constexpr (kOp != OpId::reduce_max) return Acc{0};
    else if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  // A NaN wins a max (and stays), as in PyTorch.
  static Acc add(Acc acc, T x) {
    if constexpr (kOp == OpId::reduce_max) {
      return (x > acc || x != x) ? x : acc;
    } else if constexpr (std::is_floating_point_v<T>) {
      return acc + static_cast<Acc>(x);
    } else {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x)));
    }
  }
  // Two partial results of one reduction (a max keeps a NaN either holds).
  static Acc combine(Acc a, Acc b) {
    if constexpr (kOp == OpId::reduce_max) return (b > a || b != b) ? b : a;
    else if constexpr (std::is_floating_point_v<T>) return a + b;
    else return add(a, b);
  }
  static T finish(Acc acc, int64_t count) {
    if constexpr (kOp == OpId::reduce_mean) return static_cast<T>(acc / static_cast<Acc>(count));
    else return static_cast<T>(acc);
  }
};

template <class T, OpId kOp>
Status reduceTyped(const KernelCall& call) {
  using R = Reducer<T, kOp>;
  using Acc = typename R::Acc;
  const T* x = call.in<T>(0);
  T* out = call.out<T>(0);
  const int64_t in_count = call.op.operands[0].numel(), out_count = call.op.results[0].numel();
  const int threads = threadCount(call);
  if (out_count == 0) return Status::ok();
  // 1. Empty reduced dims: the sum of nothing is 0, its mean NaN (for integers, an error).
  if (in_count == 0) {
    if constexpr (kOp == OpId::reduce_mean && !std::is_floating_point_v<T>)
      return Status::badInput("reduce_mean: the mean of an empty set of integers is undefined");
    std::fill_n(out, out_count, kOp == OpId::reduce_mean ? R::finish(Acc{0}, 0) : T{0});
    return Status::ok();
  }
  const int64_t group = in_count / out_count;  // elements per result
  const ReductionLayout layout = reductionLayout(call);
  // 2. Nothing of size > 1 is reduced: each result is its one element.
  if (group == 1) {
    parallelFor(out_count, threads, kAddWork, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = R::finish(R::add(R::start(), x[i]), 1);
    });
    return Status::ok();
  }
  const int64_t run = layout.dims.back();  // contiguous elements along the innermost merged dim
  if (layout.reduced.back()) {
    // 3. The innermost dim is reduced: each result sums contiguous runs, one per combination of
    //    the other reduced dims.
    const std::vector<int64_t> results = combinationOffsets(layout, false, false);
    const std::vector<int64_t> runs = combinationOffsets(layout, true, true);
    parallelFor(out_count, threads, group, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        Acc acc = R::start();
        for (int64_t r : runs) {
          const T* p = x + results[o] + r;
          if constexpr (kOp == OpId::reduce_max || !std::is_floating_point_v<T>) {
            for (int64_t i = 0; i < run; ++i) acc = R::add(acc, p[i]);
          } else {
            acc += sumOf(run, [p](int64_t i) { return p[i]; });
          }
        }
        out[o] = R::finish(acc, group);
      }
    });
  } else {
    // 4. The innermost dim is kept: each row of `run` results adds up rows of x, one per reduced
    //    combination. Work items are (row, block of columns, chunk of the reduced rows), each
    //    accumulated in a local buffer. With few (row, block) pairs (a bias gradient: one row of
    //    256 columns) the reduced rows split into chunks, whose partial results are then combined
    //    in chunk order: the chunks depend on the shapes only, so the result does not depend on the
    //    thread count.
    constexpr int64_t kBlock = 256;
    constexpr int64_t kMinChunkRows = 64, kMaxChunks = 16, kEnoughPairs = 16;
    const std::vector<int64_t> rows = combinationOffsets(layout, false, true);
    const std::vector<int64_t> reduced_rows = combinationOffsets(layout, true, false);
    const int64_t reduced = static_cast<int64_t>(reduced_rows.size());
    const int64_t blocks_per_row = (run + kBlock - 1) / kBlock;
    const int64_t pairs = static_cast<int64_t>(rows.size()) * blocks_per_row;
    const int64_t chunks =
        pairs >= kEnoughPairs ? 1 : std::clamp<int64_t>(reduced / kMinChunkRows, 1, kMaxChunks);
    const int64_t chunk_rows = (reduced + chunks - 1) / chunks;
    std::vector<Acc> partial(chunks > 1 ? static_cast<size_t>(pairs * chunks * kBlock) : 0);
    // Pair p's columns: the result row's offset in x, its first column and how many.
    struct Columns {
      int64_t row, first, width;
    };
    auto columnsOf = [&](int64_t pair) {
      const int64_t first = pair % blocks_per_row * kBlock;
      return Columns{pair / blocks_per_row, first, std::min(kBlock, run - first)};
    };
    auto finish = [&](const Columns& c, const Acc* acc) {
      T* o = out + c.row * run + c.first;
      for (int64_t j = 0; j < c.width; ++j) o[j] = R::finish(acc[j], group);
    };
    parallelFor(pairs * chunks, threads, chunk_rows * std::min(run, kBlock), [&](int64_t begin, int64_t end) {
      Acc local[kBlock];
      for (int64_t item = begin; item < end; ++item) {
        const int64_t chunk = item % chunks;
        const Columns c = columnsOf(item / chunks);
        Acc* acc = chunks > 1 ? partial.data() + item * kBlock : local;
        std::fill_n(acc, c.width, R::start());
        for (int64_t k = chunk * chunk_rows; k < std::min(reduced, (chunk + 1) * chunk_rows); ++k) {
          const T* p = x + rows[c.row] + reduced_rows[k] + c.first;
          for (int64_t j = 0; j < c.width; ++j) acc[j] = R::add(acc[j], p[j]);
        }
        if (chunks == 1) finish(c, acc);
      }
    });
    if (chunks > 1) {
      for (int64_t pair = 0; pair < pairs; ++pair) {
        const Columns c = columnsOf(pair);
        Acc* acc = partial.data() + pair * chunks * kBlock;
        for (int64_t chunk = 1; chunk < chunks; ++chunk)
          for (int64_t j = 0; j < c.width; ++j) acc[j] = R::combine(acc[j], acc[chunk * kBlock + j]);
        finish(c, acc);
      }
    }
  }
  return Status::ok();
}

template <OpId kOp>
Status reduceKernel(const KernelCall& call) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return reduceTyped<T, kOp>(call); });
}

// ---- softmax, log_softmax ----

// softmax or log_softmax of one contiguous row of `length` elements (a NaN makes the row NaN).
template <class T, bool kLog>
void softmaxRow(const T* x, T* y, int64_t length) {
  const T max = maxOf(x, length);
  if constexpr (kLog) {
    const T log_sum = static_cast<T>(std::log(sumOf(length, [x, max](int64_t i) { return vexp(x[i] - max); })));
    for (int64_t i = 0; i < length; ++i) y[i] = x[i] - max - log_sum;
  } else {
    for (int64_t i = 0; i < length; ++i) y[i] = vexp(x[i] - max);
    const T scale = static_cast<T>(1.0 / sumOf(length, [y](int64_t i) { return y[i]; }));
    for (int64_t i = 0; i < length; ++i) y[i] *= scale;
  }
}

// softmax or log_softmax along a dim that is not innermost: `width` (≤ kColumns) neighbouring
// columns at once, each column `length` elements apart by `stride`.
template <class T, bool kLog>
void softmaxColumns(const T* x, T* y, int64_t length, int64_t stride, int64_t width) {
  constexpr int64_t kColumns = 64;
  T max[kColumns];
  double sum[kColumns];
  std::fill_n(max, width, -std::numeric_limits<T>::infinity());
  std::fill_n(sum, width, 0.0);
  for (int64_t l = 0; l < length; ++l)
    for (int64_t j = 0; j < width; ++j) max[j] = x[l * stride + j] > max[j] ? x[l * stride + j] : max[j];
  for (int64_t l = 0; l < length; ++l)
    for (int64_t j = 0; j < width; ++j) {
      const T e = vexp(x[l * stride + j] - max[j]);
      sum[j] += static_cast<double>(e);
      if constexpr (!kLog) y[l * stride + j] = e;
    }
  for (int64_t j = 0; j < width; ++j) {
    const T factor = static_cast<T>(kLog ? std::log(sum[j]) : 1.0 / sum[j]);
    for (int64_t l = 0; l < length; ++l) {
      if constexpr (kLog) y[l * stride + j] = x[l * stride + j] - max[j] - factor;
      else y[l * stride + j] *= factor;
    }
  }
}

template <bool kLog>
Status softmaxKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[0].shape;
    const AxisView view = axisView(shape, normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    if (view.length == 0) return Status::ok();
    if (view.inner == 1) {
      parallelFor(view.outer, threadCount(call), view.length * kExpWork, [&](int64_t begin, int64_t end) {
        withWidestVectors([&] {
          for (int64_t r = begin; r < end; ++r)
            softmaxRow<T, kLog>(x + r * view.length, y + r * view.length, view.length);
        });
      });
      return Status::ok();
    }
    constexpr int64_t kColumns = 64;
    const int64_t blocks = (view.inner + kColumns - 1) / kColumns;
    parallelFor(view.outer * blocks, threadCount(call), view.length * kColumns * kExpWork,
                [&](int64_t begin, int64_t end) {
                  for (int64_t item = begin; item < end; ++item) {
                    const int64_t o = item / blocks, first = item % blocks * kColumns;
                    const int64_t offset = o * view.length * view.inner + first;
                    softmaxColumns<T, kLog>(x + offset, y + offset, view.length, view.inner,
                                            std::min(kColumns, view.inner - first));
                  }
                });
    return Status::ok();
  });
}

// ---- layer_norm, batch_norm ----

// layer_norm: per row over dims axis.., y = (x·rstd − mean·rstd)·scale + bias (PyTorch's order);
// rms_norm: y = (x·rstd)·scale, rstd = 1/sqrt(mean(x²) + epsilon) in double (Llama's order: the
// weight times the normalised row).
Status layerNormKernel(const KernelCall& call) {
  const bool rms = call.op.def.id == OpId::rms_norm;
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[0].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t rows = dimsProduct(shape, 0, axis), cols = dimsProduct(shape, axis, shape.size());
    const double epsilon = call.op.getFloat("epsilon");
    const T* x = call.in<T>(0);
    const T* scale = call.in<T>(1);
    const T* bias = call.op.operands.size() == 3 ? call.in<T>(2) : nullptr;
    T* y = call.out<T>(0);
    if (cols == 0) return Status::ok();
    parallelFor(rows, threadCount(call), cols * 8, [&](int64_t begin, int64_t end) {
      withWidestVectors([&] {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * cols;
          T* yr = y + r * cols;
          if (rms) {
            const T a = static_cast<T>(rowRmsReciprocal(xr, cols, epsilon));
            for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * a) * scale[i];
            continue;
          }
          const auto [mean, rstd] = rowMoments(xr, cols, epsilon);
          const T a = static_cast<T>(rstd), c = static_cast<T>(-rstd * mean);
          if (bias) {
            for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * a + c) * scale[i] + bias[i];
          } else {
            for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * a + c) * scale[i];
          }
        }
      });
    });
    return Status::ok();
  });
}

// batch_norm (inference): per channel alpha = scale / sqrt(var + eps), beta = bias − mean·alpha,
// y = x·alpha + beta (PyTorch's order).
Status batchNormKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[0].shape;
    const int64_t batch = shape[0], channels = shape[1], inner = dimsProduct(shape, 2, shape.size());
    const T epsilon = static_cast<T>(call.op.getFloat("epsilon"));
    const T* x = call.in<T>(0);
    const T* scale = call.in<T>(1);
    const T* bias = call.in<T>(2);
    const T* mean = call.in<T>(3);
    const T* var = call.in<T>(4);
    T* y = call.out<T>(0);
    std::vector<T> alpha(static_cast<size_t>(channels)), beta(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const T inverse_std = T(1) / std::sqrt(var[c] + epsilon);
      alpha[c] = inverse_std * scale[c];
      beta[c] = bias[c] - mean[c] * alpha[c];
    }
    parallelFor(batch * channels, threadCount(call), inner * 2, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T a = alpha[plane % channels], b = beta[plane % channels];
        const T* xp = x + plane * inner;
        T* yp = y + plane * inner;
        for (int64_t i = 0; i < inner; ++i) yp[i] = xp[i] * a + b;
      }
    });
    return Status::ok();
  });
}

// ---- argmax, cumsum: one pass along the axis per (outer, inner) column ----

// argmax: the first (or with select_last_index the last) index of the largest element; NaN is the largest.
Status argmaxKernel(const KernelCall& call) {
  const Shape& shape = call.op.operands[0].shape;
  const AxisView view = axisView(shape, normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
  const bool last = call.op.getInt("select_last_index") == 1;
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const T* x = call.in<T>(0);
    int64_t* out = call.out<int64_t>(0);
    parallelFor(view.outer * view.inner, threadCount(call), view.length, [&](int64_t begin, int64_t end) {
      for (int64_t column = begin; column < end; ++column) {
        const int64_t o = column / view.inner, k = column % view.inner;
        const T* p = x + o * view.length * view.inner + k;
        int64_t best = 0;
        T best_value = p[0];
        for (int64_t j = 1; j < view.length; ++j) {
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(best_value)) break;
            if (std::isnan(p[j * view.inner])) {
              best = j;
              break;
            }
          }
          const T v = p[j * view.inner];
          if (v > best_value || (last && v == best_value)) {
            best = j;
            best_value = v;
          }
        }
        out[column] = best;
      }
    });
    return Status::ok();
  });
}

// cumsum: running sums along the axis (floats accumulate in double, integers wrap).
Status cumsumKernel(const KernelCall& call) {
  const Shape& shape = call.op.operands[0].shape;
  const AxisView view = axisView(shape, normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
  const bool exclusive = call.op.getInt("exclusive") == 1, reverse = call.op.getInt("reverse") == 1;
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    using Acc = typename std::conditional_t<std::is_floating_point_v<T>, std::type_identity<double>, std::make_unsigned<T>>::type;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(view.outer * view.inner, threadCount(call), view.length, [&](int64_t begin, int64_t end) {
      for (int64_t column = begin; column < end; ++column) {
        const int64_t o = column / view.inner, k = column % view.inner;
        const int64_t base = o * view.length * view.inner + k;
        Acc sum{0};
        for (int64_t step = 0; step < view.length; ++step) {
          const int64_t at = base + (reverse ? view.length - 1 - step : step) * view.inner;
          const Acc value = static_cast<Acc>(x[at]);  // read before y (which may alias x) is written
          if (exclusive) y[at] = static_cast<T>(sum);
          sum += value;
          if (!exclusive) y[at] = static_cast<T>(sum);
        }
      }
    });
    return Status::ok();
  });
}

}  // namespace

void registerReductionKernels(CpuKernelTable& table) {
  auto set = [&](OpId id, CpuKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::reduce_sum, reduceKernel<OpId::reduce_sum>);
  set(OpId::reduce_mean, reduceKernel<OpId::reduce_mean>);
  set(OpId::reduce_max, reduceKernel<OpId::reduce_max>);
  set(OpId::argmax, argmaxKernel);
  set(OpId::cumsum, cumsumKernel);
  set(OpId::softmax, softmaxKernel<false>);
  set(OpId::log_softmax, softmaxKernel<true>);
  set(OpId::layer_norm, layerNormKernel);
  set(OpId::rms_norm, layerNormKernel);
  set(OpId::batch_norm, batchNormKernel);
}

}  // namespace cleave::runtime::cpu
