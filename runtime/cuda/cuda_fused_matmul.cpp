// fused_matmul on the GPU: the transposes and the bias add it folds run as kernels into temporaries
// around the matmul kernel (see runtime/cuda/cuda_kernel_support.h).
#include <string>
#include <vector>

#include "runtime/cuda/cuda_kernel_support.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/device/fused_matmul_steps.h"

namespace cleave::runtime::cuda {

Status fusedMatmulKernel(const KernelCall& call, CudaContext& context) {
  const std::string what = "fused_matmul: a temporary";
  std::vector<void*> temporaries;
  const Status status = runFusedMatmulStepwise(
      call,
      [&](int64_t bytes) -> Expected<void*> {
        void* memory = nullptr;
        CLEAVE_TRY(cudaStatus(cudaMallocAsync(&memory, static_cast<size_t>(bytes) + 1, context.compute()), what));
        temporaries.push_back(memory);
        return memory;
      },
      [&](OpId op, const KernelCall& step) { return findCudaKernel(op)(step, context); });
  // Freed in stream order: after the kernels above have run.
  for (void* memory : temporaries) (void)cudaFreeAsync(memory, context.compute());
  return status;
}

}  // namespace cleave::runtime::cuda
