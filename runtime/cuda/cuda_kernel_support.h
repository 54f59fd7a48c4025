// Host-side building blocks of the CUDA kernel files: the table's registration functions, dtype
// errors, and index maps (broadcasting, slices, sliding windows) small enough to pass to a kernel
// by value.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "runtime/cuda/cuda_kernels.h"

namespace cleave::runtime::cuda {

// Kernels indexed by OpId; nullptr where an op has none.
using CudaKernelTable = std::array<CudaKernel, kNumOps>;

// Each family file (runtime/cuda/cuda_kernels_*.cu) puts its kernels into the table; the op
// families are those of the CPU table (runtime/cpu/cpu_kernels.h).
void registerElementwiseKernels(CudaKernelTable& table);
void registerLinearAlgebraKernels(CudaKernelTable& table);
void registerReductionKernels(CudaKernelTable& table);
void registerConvolutionKernels(CudaKernelTable& table);
void registerPoolingKernels(CudaKernelTable& table);
void registerShapeKernels(CudaKernelTable& table);
void registerLossKernels(CudaKernelTable& table);
void registerGradientKernels(CudaKernelTable& table);
void registerOptimizerKernels(CudaKernelTable& table);
void registerFusedKernels(CudaKernelTable& table);  // PTX from LLVM (runtime/cuda/cuda_kernels_fused.cpp)

// A conv2d or max_pool2d with layout NHWC run by its NCHW kernel: the image transposed into a
// stream-ordered temporary, the result out of one (correct, not fast: cuDNN's NHWC paths are not
// used yet).
Status runChannelsLastThroughNchw(const KernelCall& call, CudaContext& context, CudaKernel nchw_kernel);

// fused_matmul: its permuted operands transposed into stream-ordered temporaries, the matmul kernel,
// the bias added, the product transposed into the result (correct, not fast: strided cuBLAS batches
// and cuBLASLt's bias epilogue are not used yet).
Status fusedMatmulKernel(const KernelCall& call, CudaContext& context);

// "<op>: <dtype> not supported on cuda yet" (kBadInput).
Status unsupportedOnCuda(const KernelCall& call, DType dtype);
// kRuntime naming the op when the last kernel launch failed, else ok (clears the error).
Status launchStatus(const KernelCall& call);

// The most dims (after merging) an index map holds, and the most operands it maps.
constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 3;

// Maps a flat result index to element offsets of up to kMaxOperands operands: result index i has
// the row-major multi-index idx over `dims`, and operand k's offset is base[k] + Σ idx[d]·strides[k][d].
struct IndexMap {
  int rank = 1;
  int64_t dims[kMaxDims] = {1};
  int64_t strides[kMaxOperands][kMaxDims] = {};
  int64_t base[kMaxOperands] = {};
};

// The numpy-broadcasting map of `operands` onto `result` (adjacent dims merged as the CPU does);
// kBadInput when more than kMaxDims dims remain after merging.
Expected<IndexMap> broadcastMap(const KernelCall& call, const Shape& result,
                                std::initializer_list<const Shape*> operands);

// The map of a slice (operand 0 = the sliced input) onto its result `sliced` (slice and slice_grad).
Expected<IndexMap> sliceMap(const KernelCall& call, const Shape& input, const Shape& sliced);

// The map of a transpose (operand 0 = x) onto its result.
Expected<IndexMap> transposeMap(const KernelCall& call);

// gather_elements' addressing (and its gradient's): over the indices' shape, operand 0's offset is
// the data offset of the element's coordinates with the axis one left out (its stride is 0); the
// caller adds index · axis_stride. kBadInput past kMaxDims dims.
struct ElementsMap {
  IndexMap map;
  int64_t axis_stride = 1;  // data's row-major stride of the axis
  int64_t length = 1;       // data's size along the axis
};
Expected<ElementsMap> elementsMap(const KernelCall& call, const Shape& data, const Shape& indices, int64_t axis);

// gather_nd's addressing (and its gradient's): index tuple `row` (k integers after the batch prefix)
// selects a slice of `slice` elements of data. kBadInput past kMaxDims dims.
struct NdMap {
  int64_t batch_dims = 0, k = 1, slice = 1, per_batch = 1, rows = 1;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};
Expected<NdMap> ndMap(const KernelCall& call, const Shape& data, const Shape& indices, int64_t batch_dims);

// The geometry of a conv2d or 2-D pooling window over NCHW images (as the CPU's Window2d).
struct Window {
  int64_t batch = 0, channels = 0, height = 0, width = 0;  // input N, C, H, W
  int64_t out_height = 0, out_width = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Reads strides, pads and dilations (defaults where absent; a pool's strides default to its
// kernel) for an input [N,C,H,W], an output [N,*,Ho,Wo] and a kernel of kernel_h × kernel_w.
Window readWindow(const OpContext& op, const Shape& input, const Shape& output, int64_t kernel_h, int64_t kernel_w,
                  bool pooling);

// The product of shape[first..last).
int64_t dimsProduct(const Shape& shape, size_t first, size_t last);

}  // namespace cleave::runtime::cuda
