// The CUDA kernel table and findCudaKernel.
#include <array>

#include "runtime/cuda/cuda_kernels.h"

namespace cleave::runtime {
namespace {

using CudaKernelTable = std::array<CudaKernel, kNumOps>;

const CudaKernelTable& cudaKernelTable() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t{};
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
