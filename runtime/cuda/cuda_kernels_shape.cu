// CUDA kernels of the shape and data-movement ops: reshape, flatten, squeeze, unsqueeze, transpose,
// concat, split, slice, gather, expand, trilu and constant. They move elements of any dtype by size.
#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// reshape, flatten, squeeze, unsqueeze: the same row-major elements under a new shape.
Status relabelKernel(const KernelCall& call, CudaContext& context) {
  return copyBytes(call, context, call.outputs[0], call.inputs[0], call.op.results[0].bytes());
}

// y[i] = x[offset of i under map] (transpose, slice, expand).
template <class E>
__global__ void gatherByMap(const E* x, E* y, int64_t n, IndexMap map) {
  CLEAVE_GRID_LOOP(i, n) y[i] = x[mapOffset(map, 0, i)];
}

Status copyByMap(const KernelCall& call, CudaContext& context, const IndexMap& map) {
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    gatherByMap<E><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<E>(0), call.out<E>(0), n, map);
    return launchStatus(call);
  });
}

Status transposeKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, transposeMap(call));
  if (map.rank == 1) return relabelKernel(call, context);  // no dims change places
  return copyByMap(call, context, map);
}

Status sliceKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map,
                          sliceMap(call, call.op.operands[0].shape, call.op.results[0].shape));
  return copyByMap(call, context, map);
}

Status expandKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map,
                          broadcastMap(call, call.op.results[0].shape, {&call.op.operands[0].shape}));
  return copyByMap(call, context, map);
}

// ---- concat, split ----

// Copies `height` rows of `width` bytes between pitched layouts on the compute stream.
Status copyRows(const KernelCall& call, CudaContext& context, void* to, int64_t to_pitch, const void* from,
                int64_t from_pitch, int64_t width, int64_t height) {
  if (width == 0 || height == 0) return Status::ok();
  if (height == 1) return copyBytes(call, context, to, from, width);
  return cudaStatus(cudaMemcpy2DAsync(to, static_cast<size_t>(to_pitch), from, static_cast<size_t>(from_pitch),
                                      static_cast<size_t>(width), static_cast<size_t>(height), cudaMemcpyDeviceToDevice,
                                      context.compute()),
                    std::string(call.op.def.name) + ": cudaMemcpy2DAsync");
}

// In each of `outer` rows of the whole tensor, piece i holds piece_bytes[i] consecutive bytes.
Status concatKernel(const KernelCall& call, CudaContext& context) {
  const Shape& out = call.op.results[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(out.size())));
  const int64_t inner = dimsProduct(out, axis + 1, out.size()) * dtypeSize(call.op.results[0].dtype);
  const int64_t outer = dimsProduct(out, 0, axis), row_bytes = out[axis] * inner;
  int64_t offset = 0;
  for (size_t i = 0; i < call.op.operands.size(); ++i) {
    const int64_t piece_bytes = call.op.operands[i].shape[axis] * inner;
    CLEAVE_TRY(copyRows(call, context, call.out<uint8_t>(0) + offset, row_bytes, call.inputs[i], piece_bytes,
                        piece_bytes, outer));
    offset += piece_bytes;
  }
  return Status::ok();
}

Status splitKernel(const KernelCall& call, CudaContext& context) {
  const Shape& in = call.op.operands[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(in.size())));
  const int64_t inner = dimsProduct(in, axis + 1, in.size()) * dtypeSize(call.op.operands[0].dtype);
  const int64_t outer = dimsProduct(in, 0, axis), row_bytes = in[axis] * inner;
  int64_t offset = 0;
  for (size_t i = 0; i < call.op.results.size(); ++i) {
    const int64_t piece_bytes = call.op.results[i].shape[axis] * inner;
    CLEAVE_TRY(copyRows(call, context, call.outputs[i], piece_bytes, call.in<uint8_t>(0) + offset, row_bytes,
                        piece_bytes, outer));
    offset += piece_bytes;
  }
  return Status::ok();
}

// ---- gather ----

// result[o, j, k] = data[o, indices[j], k]; negative indices count from the end. An index outside
// [-length, length) is not reported on the GPU (the CPU reports it): its row reads as zeros.
template <class E, class I>
__global__ void gatherRows(const E* data, const I* indices, E* out, int64_t n, int64_t count, int64_t length,
                           int64_t inner) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t k = i % inner, j = i / inner % count, o = i / inner / count;
    int64_t index = indices[j];
    if (index < 0) index += length;
    out[i] = (index >= 0 && index < length) ? data[(o * length + index) * inner + k] : E{0};
  }
}

Status gatherKernel(const KernelCall& call, CudaContext& context) {
  const Shape& data_shape = call.op.operands[0].shape;
  const size_t axis =
      static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size())));
  const int64_t inner = dimsProduct(data_shape, axis + 1, data_shape.size());
  const int64_t count = call.op.operands[1].numel();
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) {
    return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
      gatherRows<E, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
          call.in<E>(0), call.in<I>(1), call.out<E>(0), n, count, data_shape[axis], inner);
      return launchStatus(call);
    });
  });
}

// ---- gather_elements ----

// out[i] = data[map(i) + indices[i] · axis_stride]; negative indices count from the end. An index
// outside [-length, length) is not reported on the GPU (the CPU reports it): it reads as zero.
template <class E, class I>
__global__ void gatherElementsKernel(const E* data, const I* indices, E* out, int64_t n, IndexMap map,
                                     int64_t axis_stride, int64_t length) {
  CLEAVE_GRID_LOOP(i, n) {
    int64_t index = indices[i];
    if (index < 0) index += length;
    out[i] = (index >= 0 && index < length) ? data[mapOffset(map, 0, i) + index * axis_stride] : E{0};
  }
}

Status gatherElementsKernel(const KernelCall& call, CudaContext& context) {
  const Shape& data_shape = call.op.operands[0].shape;
  const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
  CLEAVE_ASSIGN_OR_RETURN(const ElementsMap elements, elementsMap(call, data_shape, call.op.operands[1].shape, axis));
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) {
    return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
      gatherElementsKernel<E, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
          call.in<E>(0), call.in<I>(1), call.out<E>(0), n, elements.map, elements.axis_stride, elements.length);
      return launchStatus(call);
    });
  });
}

// ---- gather_nd ----

// out[i] = data[slice of tuple i / slice, element i % slice]; a tuple out of range reads zeros (the
// CPU reports it).
template <class E, class I>
__global__ void gatherNdElements(const E* data, const I* indices, E* out, int64_t n, NdMap map) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t row = i / map.slice, offset = ndOffset(map, row, indices + row * map.k);
    out[i] = offset >= 0 ? data[offset + i % map.slice] : E{0};
  }
}

Status gatherNdKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(const NdMap map, ndMap(call, call.op.operands[0].shape, call.op.operands[1].shape,
                                                 call.op.getInt("batch_dims")));
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) {
    return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
      gatherNdElements<E, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<E>(0), call.in<I>(1),
                                                                                   call.out<E>(0), n, map);
      return launchStatus(call);
    });
  });
}

// ---- scatter_elements, scatter_nd ----

// The data offset update i lands on, or -1 for an index out of range (skipped on the GPU; the CPU reports it).
template <class I>
__device__ int64_t scatterTarget(bool elements, const I* indices, int64_t i, const ElementsMap& em, const NdMap& nm) {
  if (elements) {
    int64_t index = indices[i];
    if (index < 0) index += em.length;
    return index >= 0 && index < em.length ? mapOffset(em.map, 0, i) + index * em.axis_stride : -1;
  }
  const int64_t row = i / nm.slice, base = ndOffset(nm, row, indices + row * nm.k);
  return base >= 0 ? base + i % nm.slice : -1;
}

// *address = combine(*address) atomically, by compare-and-swap on its bits (4 or 8 bytes).
template <class T, class Combine>
__device__ void atomicCombine(T* address, Combine combine) {
  using Bits = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned int>;
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits seen = *bits, assumed;
  do {
    assumed = seen;
    T current;
    memcpy(&current, &assumed, sizeof(T));
    const T next = combine(current);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    seen = atomicCAS(bits, assumed, next_bits);
  } while (assumed != seen);
}

// Reduction none: a plain store (which of several updates to one place wins is not fixed).
template <class E, class I>
__global__ void scatterStore(const E* updates, const I* indices, E* out, int64_t n, bool elements, ElementsMap em, NdMap nm) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t target = scatterTarget(elements, indices, i, em, nm);
    if (target >= 0) out[target] = updates[i];
  }
}

// add, mul, max, min (kReduction 1..4), atomically.
template <class T, class I>
__global__ void scatterCombine(const T* updates, const I* indices, T* out, int64_t n, bool elements, ElementsMap em,
                               NdMap nm, int reduction) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t target = scatterTarget(elements, indices, i, em, nm);
    if (target < 0) continue;
    const T u = updates[i];
    atomicCombine(out + target, [=](T v) {
      return reduction == 1 ? T(v + u) : reduction == 2 ? T(v * u) : reduction == 3 ? (u > v ? u : v) : (u < v ? u : v);
    });
  }
}

Status scatterKernel(const KernelCall& call, CudaContext& context) {
  const Shape &data_shape = call.op.operands[0].shape, &index_shape = call.op.operands[1].shape;
  const bool elements = call.op.def.id == OpId::scatter_elements;
  ElementsMap em;
  NdMap nm;
  if (elements) {
    const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
    CLEAVE_ASSIGN_OR_RETURN(em, elementsMap(call, data_shape, index_shape, axis));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(nm, ndMap(call, data_shape, index_shape, 0));
  }
  if (call.outputs[0] != call.inputs[0])
    CLEAVE_TRY(copyBytes(call, context, call.outputs[0], call.inputs[0], call.op.results[0].bytes()));
  const int64_t n = call.op.operands[2].numel();
  if (n == 0) return Status::ok();
  const std::string& reduction = call.op.getString("reduction");
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
    if (reduction == "none")
      return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
        scatterStore<E, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<E>(2), call.in<I>(1),
                                                                                  call.out<E>(0), n, elements, em, nm);
        return launchStatus(call);
      });
    const int code = reduction == "add" ? 1 : reduction == "mul" ? 2 : reduction == "max" ? 3 : 4;
    return visitNumeric(call, call.op.results[0].dtype, [&]<class T>(T) {
      scatterCombine<T, I><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
          call.in<T>(2), call.in<I>(1), call.out<T>(0), n, elements, em, nm, code);
      return launchStatus(call);
    });
  });
}

// ---- trilu, constant ----

// trilu on the last two dims (row r, column c): upper keeps c − r ≥ k, lower keeps c − r ≤ k.
template <class E>
__global__ void triluElements(const E* x, E* y, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t c = i % cols, r = i / cols % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    y[i] = keep ? x[i] : E{0};
  }
}

Status triluKernel(const KernelCall& call, CudaContext& context) {
  const Shape& shape = call.op.operands[0].shape;
  const int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  const bool upper = call.op.getInt("upper") != 0;
  // k beyond ±(rows + cols) keeps everything or nothing; clamping avoids overflow in c − r − k.
  const int64_t k = std::clamp<int64_t>(call.op.getInt("k"), -(rows + cols), rows + cols);
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    triluElements<E><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<E>(0), call.out<E>(0), n, rows,
                                                                           cols, k, upper);
    return launchStatus(call);
  });
}

// The value attribute's bytes, copied from host memory (cudaMemcpyAsync returns once pageable
// bytes are staged, and the attribute outlives the plan's run anyway).
Status constantKernel(const KernelCall& call, CudaContext& context) {
  const TensorData* value = call.op.getTensor("value");
  const int64_t bytes = call.op.results[0].bytes();
  if (!value || static_cast<int64_t>(value->bytes.size()) != bytes)
    return Status::internal("constant: the value attribute does not hold " + call.op.results[0].str());
  if (bytes == 0) return Status::ok();
  return cudaStatus(cudaMemcpyAsync(call.outputs[0], value->bytes.data(), static_cast<size_t>(bytes),
                                    cudaMemcpyHostToDevice, context.compute()),
                    "constant: cudaMemcpyAsync");
}

}  // namespace

void registerShapeKernels(CudaKernelTable& table) {
  auto set = [&](OpId id, CudaKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::reshape, relabelKernel);
  set(OpId::flatten, relabelKernel);
  set(OpId::squeeze, relabelKernel);
  set(OpId::unsqueeze, relabelKernel);
  set(OpId::transpose, transposeKernel);
  set(OpId::concat, concatKernel);
  set(OpId::split, splitKernel);
  set(OpId::slice, sliceKernel);
  set(OpId::gather, gatherKernel);
  set(OpId::gather_elements, gatherElementsKernel);
  set(OpId::gather_nd, gatherNdKernel);
  set(OpId::scatter_elements, scatterKernel);
  set(OpId::scatter_nd, scatterKernel);
  set(OpId::expand, expandKernel);
  set(OpId::trilu, triluKernel);
  set(OpId::constant, constantKernel);
}

}  // namespace cleave::runtime::cuda
