// NHWC conv2d and max_pool2d on the GPU: the NCHW kernels between transposes (see
// runtime/cuda/cuda_kernel_support.h).
#include <string>
#include <vector>

#include "ir/ops/image_layout.h"
#include "runtime/cuda/cuda_kernel_support.h"
#include "runtime/cuda/cuda_kernels.h"

namespace cleave::runtime::cuda {
namespace {

// transpose's kernel from `from` (of type `from_type`) into `to` with `perm`.
Status transposeImage(const TensorType& from_type, const void* from, const std::vector<int64_t>& perm, void* to,
                      CudaContext& context) {
  const TensorType to_type{from_type.dtype, perm == toChannelsLastPerm() ? asNhwc(from_type.shape)
                                                                         : asNchw(from_type.shape, true)};
  const AttrMap attrs{{"perm", perm}};
  const void* inputs[] = {from};
  void* outputs[] = {to};
  const KernelCall transpose{OpContext{opDef(OpId::transpose), {&from_type, 1}, {&to_type, 1}, attrs}, inputs, outputs};
  return findCudaKernel(OpId::transpose)(transpose, context);
}

}  // namespace

Status runChannelsLastThroughNchw(const KernelCall& call, CudaContext& context, CudaKernel nchw_kernel) {
  std::vector<TensorType> operands(call.op.operands.begin(), call.op.operands.end());
  std::vector<TensorType> results(call.op.results.begin(), call.op.results.end());
  operands[0].shape = asNchw(operands[0].shape, true);
  results[0].shape = asNchw(results[0].shape, true);
  const std::string what = std::string(call.op.def.name) + ": NCHW copies of NHWC images";
  void* x = nullptr;
  void* y = nullptr;
  CLEAVE_TRY(cudaStatus(cudaMallocAsync(&x, static_cast<size_t>(operands[0].bytes()) + 1, context.compute()), what));
  Status status = cudaStatus(cudaMallocAsync(&y, static_cast<size_t>(results[0].bytes()) + 1, context.compute()), what);
  if (status) status = transposeImage(call.op.operands[0], call.inputs[0], toChannelsFirstPerm(), x, context);
  if (status) {
    AttrMap attrs = call.op.attrs;
    attrs["layout"] = std::string(kChannelsFirst);
    std::vector<const void*> inputs(call.inputs.begin(), call.inputs.end());
    inputs[0] = x;
    void* outputs[] = {y};
    const KernelCall nchw{OpContext{call.op.def, operands, results, attrs}, inputs, outputs, call.threads,
                          call.constant_operands, call.constants_generation};
    status = nchw_kernel(nchw, context);
  }
  if (status) status = transposeImage(results[0], y, toChannelsLastPerm(), call.outputs[0], context);
  // Freed in stream order: after the kernels above have run.
  if (y) (void)cudaFreeAsync(y, context.compute());
  (void)cudaFreeAsync(x, context.compute());
  return status;
}

}  // namespace cleave::runtime::cuda
