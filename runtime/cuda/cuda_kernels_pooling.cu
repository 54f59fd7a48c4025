// CUDA kernels of the pools over NCHW images and their gradients: max_pool2d, avg_pool2d,
// global_avg_pool, max_pool2d_grad, avg_pool2d_grad. Plain kernels rather than cuDNN: cuDNN's
// pooling has symmetric padding only and no ceil_mode, and PyTorch's window rules (a window cut off
// at the end padding, the first maximum, the last NaN) are kept exactly this way.
#include <limits>
#include <string>
#include <vector>

#include "ir/ops/image_layout.h"
#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// One dim of an output's window: input range [first, last) clipped to the image, and the window's
// length inside the padded image (as the CPU's dimWindows).
struct DimWindow {
  int64_t first, last, padded_length;
};

__device__ inline DimWindow dimWindow(int64_t out, int64_t stride, int64_t pad_begin, int64_t pad_end, int64_t kernel,
                                      int64_t size) {
  const int64_t start = out * stride - pad_begin;
  const int64_t end = min(start + kernel, size + pad_end);
  const int64_t first = max(start, int64_t{0});
  return {first, max(min(end, size), first), end - start};
}

__device__ inline DimWindow rowWindow(const Window& w, int64_t oh) {
  return dimWindow(oh, w.stride_h, w.pad_top, w.pad_bottom, w.kernel_h, w.height);
}
__device__ inline DimWindow columnWindow(const Window& w, int64_t ow) {
  return dimWindow(ow, w.stride_w, w.pad_left, w.pad_right, w.kernel_w, w.width);
}

// The plane offset of output (oh, ow)'s first maximum (a NaN counts as a maximum, so the last NaN
// wins: PyTorch's rule) and the maximum; an empty window gives its start and −inf.
template <class T>
__device__ void windowMax(const Window& w, const T* plane, int64_t oh, int64_t ow, int64_t& argmax, T& max) {
  const DimWindow rows = rowWindow(w, oh), columns = columnWindow(w, ow);
  int64_t best = rows.first * w.width + columns.first, last_nan = -1;
  T best_value = -std::numeric_limits<T>::infinity();
  for (int64_t ih = rows.first; ih < rows.last; ++ih)
    for (int64_t iw = columns.first; iw < columns.last; ++iw) {
      const T v = plane[ih * w.width + iw];
      if (v > best_value) {
        best = ih * w.width + iw;
        best_value = v;
      }
      if (v != v) last_nan = ih * w.width + iw;
    }
  argmax = last_nan >= 0 ? last_nan : best;
  max = last_nan >= 0 ? plane[last_nan] : best_value;
}

// avg_pool2d's divisor: the window's size inside the padded image with count_include_pad, else
// inside the image.
__device__ inline int64_t avgDivisor(const Window& w, int64_t oh, int64_t ow, bool count_include_pad) {
  const DimWindow rows = rowWindow(w, oh), columns = columnWindow(w, ow);
  if (count_include_pad) return rows.padded_length * columns.padded_length;
  return (rows.last - rows.first) * (columns.last - columns.first);
}

// ---- Forward pools: one thread per output ----

template <class T>
__global__ void maxPoolOutputs(const T* x, T* y, int64_t n, Window w) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t ow = i % w.out_width, oh = i / w.out_width % w.out_height, plane = i / (w.out_width * w.out_height);
    int64_t argmax;
    T max;
    windowMax(w, x + plane * w.height * w.width, oh, ow, argmax, max);
    y[i] = max;
  }
}

template <class T>
__global__ void avgPoolOutputs(const T* x, T* y, int64_t n, Window w, bool count_include_pad) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t ow = i % w.out_width, oh = i / w.out_width % w.out_height, plane = i / (w.out_width * w.out_height);
    const T* in = x + plane * w.height * w.width;
    const DimWindow rows = rowWindow(w, oh), columns = columnWindow(w, ow);
    double sum = 0;
    for (int64_t ih = rows.first; ih < rows.last; ++ih)
      for (int64_t iw = columns.first; iw < columns.last; ++iw) sum += static_cast<double>(in[ih * w.width + iw]);
    const int64_t divisor = avgDivisor(w, oh, ow, count_include_pad);
    y[i] = divisor > 0 ? static_cast<T>(sum / static_cast<double>(divisor)) : T{0};
  }
}

// The window of a pool between `input` and `output` ([N,C,H,W] and [N,C,Ho,Wo]).
Window poolWindow(const KernelCall& call, const Shape& input, const Shape& output) {
  const std::vector<int64_t>& kernel = call.op.getInts("kernel");
  return readWindow(call.op, input, output, kernel[0], kernel[1], true);
}

Status maxPoolKernel(const KernelCall& call, CudaContext& context) {
  if (isChannelsLast(call.op)) return runChannelsLastThroughNchw(call, context, maxPoolKernel);
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Window w = poolWindow(call, call.op.operands[0].shape, call.op.results[0].shape);
    const int64_t n = call.op.results[0].numel();
    if (n == 0) return Status::ok();
    maxPoolOutputs<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.out<T>(0), n, w);
    return launchStatus(call);
  });
}

Status avgPoolKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Window w = poolWindow(call, call.op.operands[0].shape, call.op.results[0].shape);
    const int64_t n = call.op.results[0].numel();
    if (n == 0) return Status::ok();
    avgPoolOutputs<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.out<T>(0), n, w, call.op.getInt("count_include_pad") != 0);
    return launchStatus(call);
  });
}

// One block per plane: y[plane] = mean of the plane (summed in double).
template <class T>
__global__ void planeMeans(const T* x, T* y, int64_t planes, int64_t plane_size) {
  CLEAVE_BLOCK_LOOP(plane, planes) {
    const T* in = x + plane * plane_size;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < plane_size; i += blockDim.x) sum += static_cast<double>(in[i]);
    sum = blockSum(sum);
    if (threadIdx.x == 0) y[plane] = static_cast<T>(sum / static_cast<double>(plane_size));
  }
}

Status globalAvgPoolKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Shape& shape = call.op.operands[0].shape;
    const int64_t planes = shape[0] * shape[1], plane_size = shape[2] * shape[3];
    if (planes == 0) return Status::ok();
    planeMeans<T><<<rowBlocks(planes), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.out<T>(0), planes,
                                                                             plane_size);
    return launchStatus(call);
  });
}

// ---- Gradients: dx zeroed, then one thread per output adds its share (atomic adds) ----

template <class T>
__global__ void maxPoolScatter(const T* dy, const T* x, T* dx, int64_t n, Window w) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t ow = i % w.out_width, oh = i / w.out_width % w.out_height, plane = i / (w.out_width * w.out_height);
    const DimWindow rows = rowWindow(w, oh), columns = columnWindow(w, ow);
    if (rows.first >= rows.last || columns.first >= columns.last) continue;
    const int64_t plane_offset = plane * w.height * w.width;
    int64_t argmax;
    T max;
    windowMax(w, x + plane_offset, oh, ow, argmax, max);
    atomicAdd(dx + plane_offset + argmax, dy[i]);
  }
}

template <class T>
__global__ void avgPoolScatter(const T* dy, T* dx, int64_t n, Window w, bool count_include_pad) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t ow = i % w.out_width, oh = i / w.out_width % w.out_height, plane = i / (w.out_width * w.out_height);
    const int64_t divisor = avgDivisor(w, oh, ow, count_include_pad);
    if (divisor <= 0) continue;
    const T share = dy[i] / static_cast<T>(divisor);
    const DimWindow rows = rowWindow(w, oh), columns = columnWindow(w, ow);
    T* out = dx + plane * w.height * w.width;
    for (int64_t ih = rows.first; ih < rows.last; ++ih)
      for (int64_t iw = columns.first; iw < columns.last; ++iw) atomicAdd(out + ih * w.width + iw, share);
  }
}

Status maxPoolGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window w = poolWindow(call, call.op.operands[1].shape, call.op.operands[0].shape);
    const int64_t n = call.op.operands[0].numel();
    CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
    if (n == 0) return Status::ok();
    maxPoolScatter<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.in<T>(1),
                                                                             call.out<T>(0), n, w);
    return launchStatus(call);
  });
}

Status avgPoolGradKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window w = poolWindow(call, call.op.results[0].shape, call.op.operands[0].shape);
    const int64_t n = call.op.operands[0].numel();
    CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
    if (n == 0) return Status::ok();
    avgPoolScatter<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.out<T>(0), n, w, call.op.getInt("count_include_pad") != 0);
    return launchStatus(call);
  });
}

}  // namespace

void registerPoolingKernels(CudaKernelTable& table) {
  table[static_cast<int>(OpId::max_pool2d)] = maxPoolKernel;
  table[static_cast<int>(OpId::avg_pool2d)] = avgPoolKernel;
  table[static_cast<int>(OpId::global_avg_pool)] = globalAvgPoolKernel;
  table[static_cast<int>(OpId::max_pool2d_grad)] = maxPoolGradKernel;
  table[static_cast<int>(OpId::avg_pool2d_grad)] = avgPoolGradKernel;
}

}  // namespace cleave::runtime::cuda
