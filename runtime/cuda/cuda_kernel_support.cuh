// Device-side building blocks of the CUDA kernel files: launch geometry, grid-stride loops, dtype
// dispatch, index maps and block reductions. Only .cu files under runtime/cuda include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/cuda_kernel_support.h"

namespace cleave::runtime::cuda {

// Threads per block of the elementwise kernels and of the block reductions.
constexpr int kBlockThreads = 256;
// The most blocks a grid-stride launch uses (each thread then loops).
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// Blocks for `n` work items of kBlockThreads each, at least 1 and at most kMaxBlocks.
inline unsigned blocksFor(int64_t n) {
  const int64_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Blocks for `n` independent rows handled one block each (grid-stride over rows).
inline unsigned rowBlocks(int64_t n) {
  return static_cast<unsigned>(n < 1 ? 1 : n > kMaxBlocks ? kMaxBlocks : n);
}

// for (int64_t i = first global thread; i < n; i += all threads): the grid-stride loop.
#define CLEAVE_GRID_LOOP(i, n)                                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// for (int64_t row = blockIdx.x; row < rows; row += gridDim.x): one block per row.
#define CLEAVE_BLOCK_LOOP(row, rows) \
  for (int64_t row = blockIdx.x; row < (rows); row += gridDim.x)

// The offset in operand k of result element i (< the product of map's dims) under `map`. What is
// left of i at the outermost dim is its index there: no division (64-bit divisions are slow here).
__device__ inline int64_t mapOffset(const IndexMap& map, int k, int64_t i) {
  int64_t offset = map.base[k];
  for (int d = map.rank - 1; d > 0; --d) {
    const int64_t dim = map.dims[d];
    offset += (i % dim) * map.strides[k][d];
    i /= dim;
  }
  return offset + i * map.strides[k][0];
}

// The data offset of gather_nd's index tuple `row` (its k indices at `tuple`), or -1 when one is out of range.
template <class I>
__device__ inline int64_t ndOffset(const NdMap& map, int64_t row, const I* tuple) {
  int64_t offset = 0, batch = map.per_batch > 0 ? row / map.per_batch : 0;
  for (int64_t d = map.batch_dims - 1; d >= 0; --d) {
    offset += batch % map.dims[d] * map.strides[d];
    batch /= map.dims[d];
  }
  for (int64_t j = 0; j < map.k; ++j) {
    const int64_t dim = map.dims[map.batch_dims + j];
    int64_t index = tuple[j];
    if (index < 0) index += dim;
    if (index < 0 || index >= dim) return -1;
    offset += index * map.strides[map.batch_dims + j];
  }
  return offset;
}

// ---- Dtype dispatch (the CPU's dtype sets, less i8/u8 for arithmetic) ----

// Calls fn(T{}) with T = float or double.
template <class Fn>
Status visitFloat(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    default: return unsupportedOnCuda(call, dtype);
  }
}

// Calls fn(T{}) with T = float, double, int64_t or int32_t.
template <class Fn>
Status visitNumeric(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    default: return unsupportedOnCuda(call, dtype);
  }
}

// Calls fn(E{}) with an unsigned integer type of the dtype's size: data movement needs only that.
template <class Fn>
Status visitBySize(DType dtype, Fn&& fn) {
  switch (dtypeSize(dtype)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

// Calls fn(I{}) with I = int64_t or int32_t for an index dtype.
template <class Fn>
Status visitIndex(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    default: return unsupportedOnCuda(call, dtype);
  }
}

// The larger of `best` and `value`, where a NaN wins (and stays).
template <class T>
__device__ T nanMax(T best, T value) {
  return (value > best || value != value) ? value : best;
}

// ---- Block reductions (blockDim.x = kBlockThreads; every thread of the block must call) ----

// The sum of every thread's `value`, returned to all threads of the block.
template <class T>
__device__ T blockSum(T value) {
  __shared__ T partial[kBlockThreads / 32];
  __syncthreads();  // a previous call's readers are done with `partial`
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  T total = T{0};
  for (int w = 0; w < kBlockThreads / 32; ++w) total += partial[w];
  return total;
}

// The maximum of every thread's `value` (a NaN wins), returned to all threads of the block.
template <class T>
__device__ T blockMax(T value) {
  __shared__ T partial[kBlockThreads / 32];
  __syncthreads();
  for (int offset = 16; offset > 0; offset /= 2) value = nanMax(value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  T best = partial[0];
  for (int w = 1; w < kBlockThreads / 32; ++w) best = nanMax(best, partial[w]);
  return best;
}

// Device math by element type: the float or the double function of the CUDA math library.

template <class T>
__device__ T deviceExp(T x) {
  if constexpr (std::is_same_v<T, float>) return expf(x);
  else return exp(x);
}
template <class T>
__device__ T deviceLog(T x) {
  if constexpr (std::is_same_v<T, float>) return logf(x);
  else return log(x);
}
template <class T>
__device__ T deviceTanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanhf(x);
  else return tanh(x);
}
template <class T>
__device__ T deviceErf(T x) {
  if constexpr (std::is_same_v<T, float>) return erff(x);
  else return erf(x);
}
template <class T>
__device__ T deviceSqrt(T x) {
  if constexpr (std::is_same_v<T, float>) return sqrtf(x);
  else return sqrt(x);
}
template <class T>
__device__ T devicePow(T a, T b) {
  if constexpr (std::is_same_v<T, float>) return powf(a, b);
  else return pow(a, b);
}

// A device copy of `bytes` bytes on the compute stream; nothing when the pointers are equal.
inline Status copyBytes(const KernelCall& call, CudaContext& context, void* to, const void* from, int64_t bytes) {
  if (to == from || bytes <= 0) return Status::ok();
  return cudaStatus(cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, context.compute()),
                    std::string(call.op.def.name) + ": cudaMemcpyAsync");
}

// Zeroes `bytes` bytes on the compute stream.
inline Status zeroBytes(const KernelCall& call, CudaContext& context, void* to, int64_t bytes) {
  if (bytes <= 0) return Status::ok();
  return cudaStatus(cudaMemsetAsync(to, 0, static_cast<size_t>(bytes), context.compute()),
                    std::string(call.op.def.name) + ": cudaMemsetAsync");
}

}  // namespace cleave::runtime::cuda
