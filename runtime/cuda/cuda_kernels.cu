// The CUDA kernel table and findCudaKernel.
#include "runtime/cuda/cuda_kernel_support.h"
#include "runtime/cuda/cuda_kernels.h"

namespace cleave::runtime {
namespace {

const cuda::CudaKernelTable& cudaKernelTable() {
  static const cuda::CudaKernelTable table = [] {
    cuda::CudaKernelTable t{};
    cuda::registerElementwiseKernels(t);
    cuda::registerLinearAlgebraKernels(t);
    cuda::registerReductionKernels(t);
    cuda::registerConvolutionKernels(t);
    cuda::registerPoolingKernels(t);
    cuda::registerShapeKernels(t);
    cuda::registerLossKernels(t);
    cuda::registerGradientKernels(t);
    cuda::registerOptimizerKernels(t);
    cuda::registerFusedKernels(t);
    return t;
  }();
  return table;
}

}  // namespace

CudaKernel findCudaKernel(OpId op) {
  const int index = static_cast<int>(op);
  if (index < 0 || index >= kNumOps) return nullptr;
  return cudaKernelTable()[index];
}

}  // namespace cleave::runtime
