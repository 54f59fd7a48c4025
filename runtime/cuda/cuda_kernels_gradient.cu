// CUDA kernels of the gradient ops not kept with their forward op's family: activation gradients
// (relu, gelu, tanh, sigmoid), softmax and log_softmax gradients, layer_norm_grad, rms_norm_grad, gather_grad,
// slice_grad and softmax_cross_entropy_grad. Results may alias same-shaped operands.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// ---- Activation gradients (PyTorch's formulas and operation order, as the CPU) ----

template <OpId kOp, class T>
struct ActivationGradient {
  bool tanh_approximation = false;  // gelu_grad only
  __device__ T operator()(T dy, T v) const {
    if constexpr (kOp == OpId::relu_grad) {
      return v > T{0} ? dy : T{0};
    } else if constexpr (kOp == OpId::tanh_grad) {
      return dy * (T(1) - v * v);
    } else if constexpr (kOp == OpId::sigmoid_grad) {
      return dy * (T(1) - v) * v;
    } else if (tanh_approximation) {  // gelu_grad
      const T beta = T(0.79788456080286535587989211986876);  // sqrt(2/pi)
      const T kappa = T(0.044715);
      const T x_sq = v * v;
      const T inner = beta * (v + kappa * x_sq * v);
      const T tanh_inner = deviceTanh(inner);
      const T left = T(0.5) * v;
      const T right = T(1) + tanh_inner;
      const T left_derivative = T(0.5) * right;
      const T right_derivative = left * (T(1) - tanh_inner * tanh_inner) * beta * (T(1) + T(3) * kappa * x_sq);
      return dy * (left_derivative + right_derivative);
    } else {
      const T cdf = T(0.5) * (T(1) + deviceErf(v * T(0.70710678118654752440084436210485)));
      const T pdf = deviceExp(T(-0.5) * v * v) * T(0.39894228040143267793994605993438);  // 1/sqrt(2·pi)
      return dy * (cdf + v * pdf);
    }
  }
};

template <class T, class Fn>
__global__ void gradientElements(const T* dy, const T* v, T* dx, int64_t n, Fn fn) {
  CLEAVE_GRID_LOOP(i, n) dx[i] = fn(dy[i], v[i]);
}

template <OpId kOp>
Status activationGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const int64_t n = call.op.results[0].numel();
    if (n == 0) return Status::ok();
    ActivationGradient<kOp, T> fn;
    if constexpr (kOp == OpId::gelu_grad) fn.tanh_approximation = call.op.getString("approximate") == "tanh";
    gradientElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.in<T>(1),
                                                                              call.out<T>(0), n, fn);
    return launchStatus(call);
  });
}

// ---- softmax_grad, log_softmax_grad ----

// One block per slice along the axis: softmax dx = y·(dy − Σ dy·y); log_softmax dx = dy − exp(y)·Σ dy.
// The sum is complete (and every read done) before any dx of the slice is written.
template <class T, bool kLog>
__global__ void softmaxGradSlices(const T* dy, const T* y, T* dx, int64_t slices, int64_t length, int64_t inner) {
  CLEAVE_BLOCK_LOOP(slice, slices) {
    const int64_t offset = slice / inner * length * inner + slice % inner;
    double sum = 0;
    for (int64_t l = threadIdx.x; l < length; l += blockDim.x) {
      const int64_t i = offset + l * inner;
      sum += kLog ? static_cast<double>(dy[i]) : static_cast<double>(dy[i]) * static_cast<double>(y[i]);
    }
    const T s = static_cast<T>(blockSum(sum));
    for (int64_t l = threadIdx.x; l < length; l += blockDim.x) {
      const int64_t i = offset + l * inner;
      dx[i] = kLog ? dy[i] - deviceExp(y[i]) * s : y[i] * (dy[i] - s);
    }
  }
}

template <bool kLog>
Status softmaxGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Shape& shape = call.op.operands[0].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t outer = dimsProduct(shape, 0, axis), length = shape[axis];
    const int64_t inner = dimsProduct(shape, axis + 1, shape.size());
    if (length == 0 || outer * inner == 0) return Status::ok();
    softmaxGradSlices<T, kLog><<<rowBlocks(outer * inner), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), call.out<T>(0), outer * inner, length, inner);
    return launchStatus(call);
  });
}

// ---- layer_norm_grad, rms_norm_grad ----

// The kernels below serve both: rms_norm_grad is layer_norm_grad with the mean taken as 0 (rstd =
// 1/sqrt(mean(x²) + epsilon)), no dbias and no mean(g) term in dx.

// One block per row: moments[2r] = mean (0 for rms), moments[2r+1] = rstd (two passes in double).
template <class T>
__global__ void layerNormMoments(const T* x, double* moments, int64_t rows, int64_t cols, double epsilon, bool rms) {
  CLEAVE_BLOCK_LOOP(r, rows) {
    const T* xr = x + r * cols;
    double sum = 0;
    if (!rms)
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) sum += static_cast<double>(xr[i]);
    const double mean = rms ? 0.0 : blockSum(sum) / static_cast<double>(cols);
    double squares = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const double centred = static_cast<double>(xr[i]) - mean;
      squares += centred * centred;
    }
    const double rstd = 1.0 / sqrt(blockSum(squares) / static_cast<double>(cols) + epsilon);
    if (threadIdx.x == 0) {
      moments[2 * r] = mean;
      moments[2 * r + 1] = rstd;
    }
  }
}

// The parameter gradients dscale = Σ_rows dy·x̂ and dbias = Σ_rows dy (x̂ = (x − mean)·rstd in T)
// are summed per chunk of rows first (blockIdx.y = the chunk, threads over columns), then over the
// chunks in order, so that every column has parallel work and the result repeats exactly.
constexpr int64_t kLayerNormChunks = 64;

// partials[chunk][0][column] = the chunk's Σ dy·x̂, partials[chunk][1][column] = its Σ dy (unused
// for rms).
template <class T>
__global__ void layerNormParameterPartials(const T* dy, const T* x, const double* moments, double* partials,
                                           int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  const int64_t chunk = blockIdx.y;
  const int64_t first = chunk * rows_per_chunk, last = min(rows, first + rows_per_chunk);
  CLEAVE_GRID_LOOP(i, cols) {
    double dscale_sum = 0, dbias_sum = 0;
    for (int64_t r = first; r < last; ++r) {
      const T mean = static_cast<T>(moments[2 * r]), rstd = static_cast<T>(moments[2 * r + 1]);
      const T g = dy[r * cols + i];
      dscale_sum += static_cast<double>(g * ((x[r * cols + i] - mean) * rstd));
      dbias_sum += static_cast<double>(g);
    }
    partials[(chunk * 2) * cols + i] = dscale_sum;
    partials[(chunk * 2 + 1) * cols + i] = dbias_sum;
  }
}

// dbias is null for rms.
template <class T>
__global__ void layerNormParameterTotals(const double* partials, T* dscale, T* dbias, int64_t cols, int64_t chunks) {
  CLEAVE_GRID_LOOP(i, cols) {
    double dscale_total = 0, dbias_total = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      dscale_total += partials[(chunk * 2) * cols + i];
      dbias_total += partials[(chunk * 2 + 1) * cols + i];
    }
    dscale[i] = static_cast<T>(dscale_total);
    if (dbias) dbias[i] = static_cast<T>(dbias_total);
  }
}

// One block per row: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·scale; for rms
// dx = rstd·(g − x̂·mean(g·x̂)).
template <class T>
__global__ void layerNormInputGrad(const T* dy, const T* x, const T* scale, const double* moments, T* dx, int64_t rows,
                                   int64_t cols, bool rms) {
  CLEAVE_BLOCK_LOOP(r, rows) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const T mean = static_cast<T>(moments[2 * r]), rstd = static_cast<T>(moments[2 * r + 1]);
    double g_sum = 0, g_xhat_sum = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const T g = dyr[i] * scale[i], xhat = (xr[i] - mean) * rstd;
      g_sum += static_cast<double>(g);
      g_xhat_sum += static_cast<double>(g * xhat);
    }
    // rms: no mean of g (the flag is the whole block's, so every thread skips blockSum's barrier).
    const T g_mean = rms ? T{0} : static_cast<T>(blockSum(g_sum) / static_cast<double>(cols));
    const T g_xhat_mean = static_cast<T>(blockSum(g_xhat_sum) / static_cast<double>(cols));
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const T g = dyr[i] * scale[i], xhat = (xr[i] - mean) * rstd;
      dxr[i] = rms ? rstd * (g - xhat * g_xhat_mean) : rstd * (g - g_mean - xhat * g_xhat_mean);
    }
  }
}

// layer_norm_grad (dx, dscale, dbias) and rms_norm_grad (dx, dscale).
Status layerNormGradKernel(const KernelCall& call, CudaContext& context) {
  const bool rms = call.op.def.id == OpId::rms_norm_grad;
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[1].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t rows = dimsProduct(shape, 0, axis), cols = dimsProduct(shape, axis, shape.size());
    const T* dy = call.in<T>(0);
    const T* x = call.in<T>(1);
    if (cols == 0) return Status::ok();
    if (rows == 0) {
      CLEAVE_TRY(zeroBytes(call, context, call.outputs[1], call.op.results[1].bytes()));
      return rms ? Status::ok() : zeroBytes(call, context, call.outputs[2], call.op.results[2].bytes());
    }
    // Moments first, then the parameter gradients, then dx (which may alias dy).
    const int64_t rows_per_chunk = (rows + kLayerNormChunks - 1) / kLayerNormChunks;
    const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
    const int64_t doubles = rows * 2 + chunks * 2 * cols;
    CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(doubles * static_cast<int64_t>(sizeof(double))));
    double* moments = static_cast<double*>(scratch);
    double* partials = moments + rows * 2;
    layerNormMoments<T><<<rowBlocks(rows), kBlockThreads, 0, context.compute()>>>(x, moments, rows, cols,
                                                                                 call.op.getFloat("epsilon"), rms);
    CLEAVE_TRY(launchStatus(call));
    const dim3 grid(std::min<unsigned>(blocksFor(cols), 65535u), static_cast<unsigned>(chunks));
    layerNormParameterPartials<T><<<grid, kBlockThreads, 0, context.compute()>>>(dy, x, moments, partials, rows, cols,
                                                                                 rows_per_chunk);
    CLEAVE_TRY(launchStatus(call));
    layerNormParameterTotals<T><<<blocksFor(cols), kBlockThreads, 0, context.compute()>>>(
        partials, call.out<T>(1), rms ? nullptr : call.out<T>(2), cols, chunks);
    CLEAVE_TRY(launchStatus(call));
    layerNormInputGrad<T><<<rowBlocks(rows), kBlockThreads, 0, context.compute()>>>(dy, x, call.in<T>(2), moments,
                                                                                   call.out<T>(0), rows, cols, rms);
    return launchStatus(call);
  });
}

// ---- gather_grad, slice_grad ----

// dx[o, indices[j], k] += dy[o, j, k] by atomic adds (the order of the adds is not fixed). An
// index outside [-length, length) is not reported on the GPU (the CPU reports it): it is skipped.
template <class T, class I>
__global__ void scatterAddRows(const T* dy, const I* indices, T* dx, int64_t n, int64_t count, int64_t length,
                               int64_t inner) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t k = i % inner, j = i / inner % count, o = i / inner / count;
    int64_t index = indices[j];
    if (index < 0) index += length;
    if (index >= 0 && index < length) atomicAdd(dx + (o * length + index) * inner + k, dy[i]);
  }
}

Status gatherGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const Shape& data_shape = call.op.results[0].shape;
      const size_t axis =
          static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size())));
      const int64_t inner = dimsProduct(data_shape, axis + 1, data_shape.size());
      const int64_t n = call.op.operands[0].numel();
      CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
      if (n == 0) return Status::ok();
      scatterAddRows<T, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
          call.in<T>(0), call.in<I>(1), call.out<T>(0), n, call.op.operands[1].numel(), data_shape[axis], inner);
      return launchStatus(call);
    });
  });
}

// dx[map(i) + indices[i] · axis_stride] += dy[i] by atomic adds; an index out of range is skipped.
template <class T, class I>
__global__ void scatterAddElements(const T* dy, const I* indices, T* dx, int64_t n, IndexMap map, int64_t axis_stride,
                                   int64_t length) {
  CLEAVE_GRID_LOOP(i, n) {
    int64_t index = indices[i];
    if (index < 0) index += length;
    if (index >= 0 && index < length) atomicAdd(dx + mapOffset(map, 0, i) + index * axis_stride, dy[i]);
  }
}

Status gatherElementsGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const Shape& data_shape = call.op.results[0].shape;
      const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
      CLEAVE_ASSIGN_OR_RETURN(const ElementsMap elements, elementsMap(call, data_shape, call.op.operands[1].shape, axis));
      const int64_t n = call.op.operands[0].numel();
      CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
      if (n == 0) return Status::ok();
      scatterAddElements<T, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
          call.in<T>(0), call.in<I>(1), call.out<T>(0), n, elements.map, elements.axis_stride, elements.length);
      return launchStatus(call);
    });
  });
}

// dx[slice of tuple i / slice, element i % slice] += dy[i] by atomic adds; a tuple out of range is skipped.
template <class T, class I>
__global__ void scatterAddNd(const T* dy, const I* indices, T* dx, int64_t n, NdMap map) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t row = i / map.slice, offset = ndOffset(map, row, indices + row * map.k);
    if (offset >= 0) atomicAdd(dx + offset + i % map.slice, dy[i]);
  }
}

Status gatherNdGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      CLEAVE_ASSIGN_OR_RETURN(const NdMap map, ndMap(call, call.op.results[0].shape, call.op.operands[1].shape,
                                                     call.op.getInt("batch_dims")));
      const int64_t n = call.op.operands[0].numel();
      CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
      if (n == 0) return Status::ok();
      scatterAddNd<T, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.in<I>(1),
                                                                               call.out<T>(0), n, map);
      return launchStatus(call);
    });
  });
}

// dx = zeros of input_shape with dy written where the slice read (each place at most once).
template <class E>
__global__ void scatterByMap(const E* dy, E* dx, int64_t n, IndexMap map) {
  CLEAVE_GRID_LOOP(i, n) dx[mapOffset(map, 0, i)] = dy[i];
}

Status sliceGradKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, sliceMap(call, call.op.results[0].shape, call.op.operands[0].shape));
  CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
  const int64_t n = call.op.operands[0].numel();
  if (n == 0) return Status::ok();
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    scatterByMap<E><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<E>(0), call.out<E>(0), n, map);
    return launchStatus(call);
  });
}

// ---- softmax_cross_entropy_grad ----

// One block: *counted = the number of labels that are not ignore_index.
template <class I>
__global__ void countLabels(const I* labels, int64_t rows, int64_t ignore_index, double* counted) {
  double count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) count += labels[r] != ignore_index ? 1.0 : 0.0;
  count = blockSum(count);
  if (threadIdx.x == 0) *counted = count;
}

// One block per row: dlogits = (softmax(row) − onehot(label))·dloss/count, 0 for ignored rows.
template <class T, class I>
__global__ void crossEntropyGradRows(const float* dloss, const T* logits, const I* labels, const double* counted,
                                     T* dlogits, int64_t rows, int64_t classes, int64_t ignore_index) {
  const T scale = static_cast<T>(*counted > 0 ? static_cast<double>(*dloss) / *counted : 0.0);
  CLEAVE_BLOCK_LOOP(r, rows) {
    const T* row = logits + r * classes;
    T* out = dlogits + r * classes;
    const int64_t label = labels[r];
    if (label == ignore_index) {  // the whole block takes this branch
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) out[c] = T{0};
      continue;
    }
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) max = nanMax(max, row[c]);
    max = blockMax(max);
    double sum = 0;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) sum += static_cast<double>(deviceExp(row[c] - max));
    const T inverse_sum = static_cast<T>(1.0 / blockSum(sum));
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      out[c] = (deviceExp(row[c] - max) * inverse_sum - (c == label ? T(1) : T(0))) * scale;
  }
}

Status softmaxCrossEntropyGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[1].dtype, [&]<class T>(T) {
    return visitIndex(call, call.op.operands[2].dtype, [&]<class I>(I) -> Status {
      const int64_t classes = call.op.operands[1].shape.back();
      const int64_t rows = call.op.operands[2].numel();
      const int64_t ignore_index = call.op.getInt("ignore_index");
      if (rows == 0 || classes == 0) return Status::ok();
      CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(sizeof(double)));
      double* counted = static_cast<double*>(scratch);
      countLabels<I><<<1, kBlockThreads, 0, context.compute()>>>(call.in<I>(2), rows, ignore_index, counted);
      CLEAVE_TRY(launchStatus(call));
      crossEntropyGradRows<T, I><<<rowBlocks(rows), kBlockThreads, 0, context.compute()>>>(
          call.in<float>(0), call.in<T>(1), call.in<I>(2), counted, call.out<T>(0), rows, classes, ignore_index);
      return launchStatus(call);
    });
  });
}

}  // namespace

void registerGradientKernels(CudaKernelTable& table) {
  auto set = [&](OpId id, CudaKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::relu_grad, activationGradKernel<OpId::relu_grad>);
  set(OpId::gelu_grad, activationGradKernel<OpId::gelu_grad>);
  set(OpId::tanh_grad, activationGradKernel<OpId::tanh_grad>);
  set(OpId::sigmoid_grad, activationGradKernel<OpId::sigmoid_grad>);
  set(OpId::softmax_grad, softmaxGradKernel<false>);
  set(OpId::log_softmax_grad, softmaxGradKernel<true>);
  set(OpId::layer_norm_grad, layerNormGradKernel);
  set(OpId::rms_norm_grad, layerNormGradKernel);
  set(OpId::gather_grad, gatherGradKernel);
  set(OpId::gather_elements_grad, gatherElementsGradKernel);
  set(OpId::gather_nd_grad, gatherNdGradKernel);
  set(OpId::slice_grad, sliceGradKernel);
  set(OpId::softmax_cross_entropy_grad, softmaxCrossEntropyGradKernel);
}

}  // namespace cleave::runtime::cuda
