// CUDA kernels of the reductions and normalisations: reduce_sum/mean/max, softmax, log_softmax,
// layer_norm, rms_norm and batch_norm. Float sums accumulate in double, as on the CPU (in a tree order).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// ---- reduce_sum, reduce_mean, reduce_max ----

// The accumulator of a sum: double for floats; for integers the unsigned type, which wraps around.
template <class T, bool kFloat = std::is_floating_point_v<T>>
struct SumAccumulator {
  using type = double;
};
template <class T>
struct SumAccumulator<T, false> {
  using type = std::make_unsigned_t<T>;
};

// How a reduction starts, adds one element, combines partial results and ends.
template <class T, OpId kOp>
struct Reducer {
  using Acc = std::conditional_t<kOp == OpId::reduce_max, T, typename SumAccumulator<T>::type>;

  __device__ static Acc start() {
    if constexpr (kOp != OpId::reduce_max) return Acc{0};
    else if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  // A NaN wins a max (and stays), as in PyTorch.
  __device__ static Acc add(Acc acc, T x) {
    if constexpr (kOp == OpId::reduce_max) return nanMax(acc, x);
    else return acc + static_cast<Acc>(x);
  }
  // Two partial results of disjoint parts, `first` the earlier part.
  __device__ static Acc merge(Acc first, Acc second) {
    if constexpr (kOp == OpId::reduce_max) return nanMax(first, second);
    else return first + second;
  }
  __device__ static Acc combine(Acc partial) {
    if constexpr (kOp == OpId::reduce_max) return blockMax(partial);
    else return blockSum(partial);
  }
  __device__ static T finish(Acc acc, int64_t count) {
    if constexpr (kOp != OpId::reduce_mean) return static_cast<T>(acc);
    else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(acc / static_cast<double>(count));
    else return static_cast<T>(static_cast<T>(acc) / static_cast<T>(count));
  }
};

// One block per result: out[o] = reduction over the `group` elements at kept(o) + reduced(r).
template <class T, OpId kOp>
__global__ void reduceByBlocks(const T* x, T* out, int64_t out_count, int64_t group, IndexMap kept, IndexMap reduced) {
  using R = Reducer<T, kOp>;
  CLEAVE_BLOCK_LOOP(o, out_count) {
    const T* base = x + mapOffset(kept, 0, o);
    typename R::Acc acc = R::start();
    for (int64_t r = threadIdx.x; r < group; r += blockDim.x) acc = R::add(acc, base[mapOffset(reduced, 0, r)]);
    acc = R::combine(acc);
    if (threadIdx.x == 0) out[o] = R::finish(acc, group);
  }
}

// One thread per result, for small groups.
template <class T, OpId kOp>
__global__ void reduceByThreads(const T* x, T* out, int64_t out_count, int64_t group, IndexMap kept, IndexMap reduced) {
  using R = Reducer<T, kOp>;
  CLEAVE_GRID_LOOP(o, out_count) {
    const T* base = x + mapOffset(kept, 0, o);
    typename R::Acc acc = R::start();
    for (int64_t r = 0; r < group; ++r) acc = R::add(acc, base[mapOffset(reduced, 0, r)]);
    out[o] = R::finish(acc, group);
  }
}

// Few results of many elements each, in chunks: the grid's blocks take (result, chunk) pairs and
// write each chunk's partial result to partials[chunk * out_count + result].
template <class T, OpId kOp>
__global__ void reduceChunksByBlocks(const T* x, typename Reducer<T, kOp>::Acc* partials, int64_t out_count,
                                     int64_t group, int64_t chunks, int64_t chunk, IndexMap kept, IndexMap reduced) {
  using R = Reducer<T, kOp>;
  CLEAVE_BLOCK_LOOP(item, out_count * chunks) {
    const int64_t o = item / chunks, begin = item % chunks * chunk, end = begin + chunk < group ? begin + chunk : group;
    const T* base = x + mapOffset(kept, 0, o);
    typename R::Acc acc = R::start();
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) acc = R::add(acc, base[mapOffset(reduced, 0, r)]);
    acc = R::combine(acc);
    if (threadIdx.x == 0) partials[item % chunks * out_count + o] = acc;
  }
}

// The same with a thread per (result, chunk) pair, neighbouring threads on neighbouring results
// (for results adjacent in memory: a sum over the leading axis, such as a bias gradient).
template <class T, OpId kOp>
__global__ void reduceChunksByThreads(const T* x, typename Reducer<T, kOp>::Acc* partials, int64_t out_count,
                                      int64_t group, int64_t chunks, int64_t chunk, IndexMap kept, IndexMap reduced) {
  using R = Reducer<T, kOp>;
  CLEAVE_GRID_LOOP(item, out_count * chunks) {
    const int64_t o = item % out_count, c = item / out_count;
    const int64_t begin = c * chunk, end = begin + chunk < group ? begin + chunk : group;
    const T* base = x + mapOffset(kept, 0, o);
    typename R::Acc acc = R::start();
    for (int64_t r = begin; r < end; ++r) acc = R::add(acc, base[mapOffset(reduced, 0, r)]);
    partials[c * out_count + o] = acc;
  }
}

// out[o] = the merge of result o's chunks' partials, in a fixed order (the same on every run).
// A block takes kMergeResults adjacent results with kMergeLanes threads each: lane l merges chunks
// l, l + kMergeLanes, ... in order, then lane 0 merges the lanes' partials in lane order. A thread
// per result merging all chunks alone is latency-bound (128 dependent loads: 16 us a launch).
constexpr int kMergeResults = 32;
constexpr int kMergeLanes = kBlockThreads / kMergeResults;

template <class T, OpId kOp>
__global__ void mergeChunks(const typename Reducer<T, kOp>::Acc* partials, T* out, int64_t out_count, int64_t group,
                            int64_t chunks) {
  using R = Reducer<T, kOp>;
  __shared__ typename R::Acc lane_partials[kMergeLanes][kMergeResults];
  const int result_in_block = threadIdx.x % kMergeResults, lane = threadIdx.x / kMergeResults;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kMergeResults; first < out_count;
       first += static_cast<int64_t>(gridDim.x) * kMergeResults) {
    const int64_t o = first + result_in_block;
    typename R::Acc acc = R::start();
    if (o < out_count && lane < chunks) {
      acc = partials[lane * out_count + o];
      for (int64_t c = lane + kMergeLanes; c < chunks; c += kMergeLanes) acc = R::merge(acc, partials[c * out_count + o]);
    }
    lane_partials[lane][result_in_block] = acc;
    __syncthreads();
    if (lane == 0 && o < out_count) {
      for (int l = 1; l < kMergeLanes && l < chunks; ++l) acc = R::merge(acc, lane_partials[l][result_in_block]);
      out[o] = R::finish(acc, group);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void fillElements(T* out, int64_t n, T value) {
  CLEAVE_GRID_LOOP(i, n) out[i] = value;
}

// The kept and reduced dims of x (size-1 dims dropped, neighbours of one kind merged) as two maps
// with x's strides; kBadInput beyond kMaxDims dims of one kind.
Status reductionMaps(const KernelCall& call, IndexMap& kept, IndexMap& reduced) {
  const Shape& shape = call.op.operands[0].shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const std::vector<int64_t>& axes = call.op.getInts("axes");
  std::vector<bool> is_reduced(shape.size(), axes.empty());
  for (int64_t axis : axes) is_reduced[static_cast<size_t>(normalizeAxis(axis, rank))] = true;
  std::vector<int64_t> dims, strides;
  std::vector<bool> kinds;
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1) {
      if (!dims.empty() && kinds.back() == is_reduced[d] && strides.back() * dims.back() == stride) {
        dims.back() *= shape[d];
      } else {
        dims.push_back(shape[d]);
        strides.push_back(stride);
        kinds.push_back(is_reduced[d]);
      }
    }
    stride *= shape[d];
  }
  // dims are innermost first: fill each map outermost first.
  for (IndexMap* map : {&kept, &reduced}) {
    const bool kind = map == &reduced;
    std::vector<size_t> picked;
    for (size_t j = dims.size(); j-- > 0;)
      if (kinds[j] == kind) picked.push_back(j);
    if (picked.size() > static_cast<size_t>(kMaxDims))
      return Status::badInput(std::string(call.op.def.name) + ": more than " + std::to_string(kMaxDims) +
                              " separate dims to reduce or keep on cuda");
    *map = IndexMap{};
    map->rank = picked.empty() ? 1 : static_cast<int>(picked.size());
    for (size_t p = 0; p < picked.size(); ++p) {
      map->dims[p] = dims[picked[p]];
      map->strides[0][p] = strides[picked[p]];
    }
  }
  return Status::ok();
}

// When a reduction is split into chunks: enough (result, chunk) pairs for the GPU's blocks or
// threads, each chunk at least this long.
constexpr int64_t kChunkedBlocks = 1024;
constexpr int64_t kMinBlockChunk = 16 * kBlockThreads;
constexpr int64_t kChunkedThreads = 128 * 1024;
constexpr int64_t kMinThreadChunk = 16;

template <class T, OpId kOp>
Status reduceTyped(const KernelCall& call, CudaContext& context) {
  const T* x = call.in<T>(0);
  T* out = call.out<T>(0);
  const int64_t in_count = call.op.operands[0].numel(), out_count = call.op.results[0].numel();
  if (out_count == 0) return Status::ok();
  // 1. Empty reduced dims: the sum of nothing is 0, its mean NaN (for integers, an error).
  if (in_count == 0) {
    if constexpr (kOp == OpId::reduce_mean && !std::is_floating_point_v<T>) {
      return Status::badInput("reduce_mean: the mean of an empty set of integers is undefined");
    } else {
      const T value = kOp == OpId::reduce_mean ? std::numeric_limits<T>::quiet_NaN() : T{0};
      fillElements<T><<<blocksFor(out_count), kBlockThreads, 0, context.compute()>>>(out, out_count, value);
      return launchStatus(call);
    }
  }
  // 2. One block per result, or one thread per result when each reduces only a few elements.
  const int64_t group = in_count / out_count;
  IndexMap kept, reduced;
  CLEAVE_TRY(reductionMaps(call, kept, reduced));
  // 3. Too few results to fill the GPU (a convolution's bias gradient: 32 sums of 200,000
  //    elements; a linear layer's, 512 of 2,048 rows): each result's elements in chunks, reduced in
  //    parallel and merged in chunk order (the same order on every run). Where the results are
  //    adjacent in memory, a thread per (result, chunk) reads them coalesced; else a block.
  const bool results_adjacent = kept.strides[0][kept.rank - 1] == 1 && reduced.strides[0][reduced.rank - 1] != 1;
  const int64_t workers = results_adjacent ? kChunkedThreads : kChunkedBlocks;
  const int64_t min_chunk = results_adjacent ? kMinThreadChunk : kMinBlockChunk;
  const int64_t chunks = std::min((workers + out_count - 1) / out_count, (group + min_chunk - 1) / min_chunk);
  if (chunks > 1) {
    using Acc = typename Reducer<T, kOp>::Acc;
    const int64_t chunk = (group + chunks - 1) / chunks;
    CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(out_count * chunks * static_cast<int64_t>(sizeof(Acc))));
    Acc* partials = static_cast<Acc*>(scratch);
    if (results_adjacent)
      reduceChunksByThreads<T, kOp><<<blocksFor(out_count * chunks), kBlockThreads, 0, context.compute()>>>(
          x, partials, out_count, group, chunks, chunk, kept, reduced);
    else
      reduceChunksByBlocks<T, kOp><<<rowBlocks(out_count * chunks), kBlockThreads, 0, context.compute()>>>(
          x, partials, out_count, group, chunks, chunk, kept, reduced);
    const int64_t merge_blocks = std::min<int64_t>((out_count + kMergeResults - 1) / kMergeResults, kMaxBlocks);
    mergeChunks<T, kOp><<<static_cast<unsigned>(merge_blocks), kBlockThreads, 0, context.compute()>>>(
        partials, out, out_count, group, chunks);
    return launchStatus(call);
  }
  if (group <= 32)
    reduceByThreads<T, kOp><<<blocksFor(out_count), kBlockThreads, 0, context.compute()>>>(x, out, out_count, group,
                                                                                          kept, reduced);
  else
    reduceByBlocks<T, kOp><<<rowBlocks(out_count), kBlockThreads, 0, context.compute()>>>(x, out, out_count, group,
                                                                                         kept, reduced);
  return launchStatus(call);
}

template <OpId kOp>
Status reduceKernel(const KernelCall& call, CudaContext& context) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return reduceTyped<T, kOp>(call, context); });
}

// ---- softmax, log_softmax ----

template <class T>
__device__ T deviceExp(T x) {
  if constexpr (std::is_same_v<T, float>) return expf(x);
  else return exp(x);
}

// One block per slice along the axis (`length` elements `inner` apart; slices are (outer, inner)
// pairs): softmax y = exp(x − max)·(1/Σ), log_softmax y = x − max − log Σ, Σ in double.
template <class T, bool kLog>
__global__ void softmaxSlices(const T* x, T* y, int64_t slices, int64_t length, int64_t inner) {
  CLEAVE_BLOCK_LOOP(slice, slices) {
    const int64_t offset = slice / inner * length * inner + slice % inner;
    const T* xs = x + offset;
    T* ys = y + offset;
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t l = threadIdx.x; l < length; l += blockDim.x) max = nanMax(max, xs[l * inner]);
    max = blockMax(max);
    double sum = 0;
    for (int64_t l = threadIdx.x; l < length; l += blockDim.x) sum += static_cast<double>(deviceExp(xs[l * inner] - max));
    sum = blockSum(sum);
    if constexpr (kLog) {
      const T log_sum = static_cast<T>(log(sum));
      for (int64_t l = threadIdx.x; l < length; l += blockDim.x) ys[l * inner] = xs[l * inner] - max - log_sum;
    } else {
      const T scale = static_cast<T>(1.0 / sum);
      for (int64_t l = threadIdx.x; l < length; l += blockDim.x) ys[l * inner] = deviceExp(xs[l * inner] - max) * scale;
    }
  }
}

template <bool kLog>
Status softmaxKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Shape& shape = call.op.operands[0].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t outer = dimsProduct(shape, 0, axis), length = shape[axis];
    const int64_t inner = dimsProduct(shape, axis + 1, shape.size());
    if (length == 0 || outer * inner == 0) return Status::ok();
    softmaxSlices<T, kLog><<<rowBlocks(outer * inner), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.out<T>(0), outer * inner, length, inner);
    return launchStatus(call);
  });
}

// ---- layer_norm, batch_norm ----

// Mean and 1/sqrt(biased variance + epsilon) of one row (two passes, in double), for every thread
// of the block; for rms the mean is taken as 0 (rstd = 1/sqrt(mean(x²) + epsilon)).
template <class T>
__device__ void rowMoments(const T* x, int64_t cols, double epsilon, bool rms, double& mean, double& rstd) {
  double sum = 0;
  if (!rms)
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) sum += static_cast<double>(x[i]);
  mean = rms ? 0.0 : blockSum(sum) / static_cast<double>(cols);
  double squares = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const double centred = static_cast<double>(x[i]) - mean;
    squares += centred * centred;
  }
  rstd = 1.0 / sqrt(blockSum(squares) / static_cast<double>(cols) + epsilon);
}

// One block per row: y = (x·rstd − mean·rstd)·scale + bias (PyTorch's order, as the CPU); for rms
// (rms_norm) y = (x·rstd)·scale.
template <class T>
__global__ void layerNormRows(const T* x, const T* scale, const T* bias, T* y, int64_t rows, int64_t cols,
                              double epsilon, bool rms) {
  CLEAVE_BLOCK_LOOP(r, rows) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double mean, rstd;
    rowMoments(xr, cols, epsilon, rms, mean, rstd);
    const T a = static_cast<T>(rstd), c = static_cast<T>(-rstd * mean);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const T normalised = rms ? (xr[i] * a) * scale[i] : (xr[i] * a + c) * scale[i];
      yr[i] = bias ? normalised + bias[i] : normalised;
    }
  }
}

// layer_norm and rms_norm.
Status layerNormKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Shape& shape = call.op.operands[0].shape;
    const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
    const int64_t rows = dimsProduct(shape, 0, axis), cols = dimsProduct(shape, axis, shape.size());
    if (cols == 0 || rows == 0) return Status::ok();
    const T* bias = call.op.operands.size() == 3 ? call.in<T>(2) : nullptr;
    layerNormRows<T><<<rowBlocks(rows), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), bias, call.out<T>(0), rows, cols, call.op.getFloat("epsilon"),
        call.op.def.id == OpId::rms_norm);
    return launchStatus(call);
  });
}

// batch_norm (inference): per channel alpha = scale / sqrt(var + eps), beta = bias − mean·alpha,
// y = x·alpha + beta (the CPU's order).
template <class T>
__global__ void batchNormElements(const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y,
                                  int64_t n, int64_t channels, int64_t inner, T epsilon) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t c = i / inner % channels;
    const T inverse_std = T(1) / sqrt(var[c] + epsilon);
    const T alpha = inverse_std * scale[c];
    const T beta = bias[c] - mean[c] * alpha;
    y[i] = x[i] * alpha + beta;
  }
}

Status batchNormKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Shape& shape = call.op.operands[0].shape;
    const int64_t n = call.op.operands[0].numel();
    if (n == 0) return Status::ok();
    batchNormElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), call.in<T>(2), call.in<T>(3), call.in<T>(4), call.out<T>(0), n, shape[1],
        dimsProduct(shape, 2, shape.size()), static_cast<T>(call.op.getFloat("epsilon")));
    return launchStatus(call);
  });
}

// ---- argmax, cumsum: one thread per (outer, inner) column walks the axis ----

// argmax: the first (or last, with select_last_index) index of the largest element; NaN is the largest.
template <class T>
__global__ void argmaxColumns(const T* x, int64_t* out, int64_t columns, int64_t length, int64_t inner, bool last) {
  CLEAVE_GRID_LOOP(column, columns) {
    const T* p = x + column / inner * length * inner + column % inner;
    int64_t best = 0;
    T best_value = p[0];
    for (int64_t j = 1; j < length; ++j) {
      const T v = p[j * inner];
      if (best_value != best_value) break;  // NaN found
      if (v != v || v > best_value || (last && v == best_value)) {
        best = j;
        best_value = v;
      }
    }
    out[column] = best;
  }
}

Status argmaxKernel(const KernelCall& call, CudaContext& context) {
  const Shape& shape = call.op.operands[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
  const int64_t length = shape[axis], inner = dimsProduct(shape, axis + 1, shape.size());
  const int64_t columns = call.op.results[0].numel();
  if (columns == 0) return Status::ok();
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) {
    argmaxColumns<T><<<blocksFor(columns), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.out<int64_t>(0), columns, length, inner, call.op.getInt("select_last_index") == 1);
    return launchStatus(call);
  });
}

// cumsum: running sums along the axis (floats accumulate in double, integers wrap).
template <class T>
__global__ void cumsumColumns(const T* x, T* y, int64_t columns, int64_t length, int64_t inner, bool exclusive,
                              bool reverse) {
  using Acc = typename std::conditional_t<std::is_floating_point_v<T>, std::type_identity<double>, std::make_unsigned<T>>::type;
  CLEAVE_GRID_LOOP(column, columns) {
    const int64_t base = column / inner * length * inner + column % inner;
    Acc sum{0};
    for (int64_t step = 0; step < length; ++step) {
      const int64_t at = base + (reverse ? length - 1 - step : step) * inner;
      const Acc value = static_cast<Acc>(x[at]);
      if (exclusive) y[at] = static_cast<T>(sum);
      sum += value;
      if (!exclusive) y[at] = static_cast<T>(sum);
    }
  }
}

Status cumsumKernel(const KernelCall& call, CudaContext& context) {
  const Shape& shape = call.op.operands[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(shape.size())));
  const int64_t length = shape[axis], inner = dimsProduct(shape, axis + 1, shape.size());
  const int64_t columns = length == 0 ? 0 : call.op.results[0].numel() / length;
  if (columns == 0) return Status::ok();
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) {
    cumsumColumns<T><<<blocksFor(columns), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.out<T>(0), columns, length, inner, call.op.getInt("exclusive") == 1,
        call.op.getInt("reverse") == 1);
    return launchStatus(call);
  });
}

}  // namespace

void registerReductionKernels(CudaKernelTable& table) {
  auto set = [&](OpId id, CudaKernel kernel) { table[static_cast<int>(id)] = kernel; };
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

}  // namespace cleave::runtime::cuda
