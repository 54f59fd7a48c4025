// NHWC conv2d and max_pool2d on the GPU: the NCHW kernels between transposes (see
// runtime/cuda/cuda_kernel_support.h).
#include <string>

#include "runtime/cuda/cuda_kernel_support.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/device/channels_first_call.h"

namespace cleave::runtime::cuda {

Status runChannelsLastThroughNchw(const KernelCall& call, CudaContext& context, CudaKernel nchw_kernel) {
  const CudaKernel transpose = findCudaKernel(OpId::transpose);
  const std::string what = std::string(call.op.def.name) + ": NCHW copies of NHWC images";
  void* x = nullptr;
  void* y = nullptr;
  CLEAVE_TRY(cudaStatus(cudaMallocAsync(&x, static_cast<size_t>(call.op.operands[0].bytes()) + 1, context.compute()), what));
  Status status = cudaStatus(cudaMallocAsync(&y, static_cast<size_t>(call.op.results[0].bytes()) + 1, context.compute()), what);
  const ChannelsFirstCall nchw(call, x, y);
  if (status) status = transpose(LayoutTransposeCall(call.op.operands[0], call.inputs[0], x, false, 1).call(), context);
  if (status) status = nchw_kernel(nchw.call(), context);
  if (status) status = transpose(LayoutTransposeCall(nchw.result(), y, call.outputs[0], true, 1).call(), context);
  // Freed in stream order: after the kernels above have run.
  if (y) (void)cudaFreeAsync(y, context.compute());
  (void)cudaFreeAsync(x, context.compute());
  return status;
}

}  // namespace cleave::runtime::cuda
