// The CUDA kernel of fused nodes: PTX from LLVM's NVPTX backend (runtime/codegen/ptx_compiler.h),
// loaded once per node kind and device with the runtime's library API, launched as a grid-stride loop.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/codegen/fused_kernel_ir.h"
#include "runtime/codegen/ptx_compiler.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernel_support.h"

namespace cleave::runtime::cuda {
namespace {

constexpr const char* kKernelName = "cleave_fused";
constexpr int kThreadsPerBlock = 256;
static_assert(kThreadsPerBlock % codegen::kWarpLanes == 0);
constexpr int64_t kMaxBlocks = 65535;

// A loaded fused kernel and what its `count` parameter counts: elements, or rows of row_length.
struct LoadedKernel {
  cudaKernel_t kernel = nullptr;
  int64_t row_length = 0;
  std::vector<int> summed_result;  // per result: -1, or for a column sum the result it sums
};

// The loaded kernel of a fused node on the current device, loading it on first use.
Expected<LoadedKernel> loadedKernel(const KernelCall& call) {
  static std::mutex mutex;
  static std::map<std::string, LoadedKernel> kernels;
  int device = 0;
  CLEAVE_TRY(cudaStatus(cudaGetDevice(&device), "fused: cudaGetDevice"));
  const std::string key = codegen::fusedKernelKey(call.op) + "|device " + std::to_string(device);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = kernels.find(key); it != kernels.end()) return it->second;
  CLEAVE_ASSIGN_OR_RETURN(codegen::FusedKernelSpec spec, codegen::fusedKernelSpec(call.op));
  CLEAVE_ASSIGN_OR_RETURN(std::string ptx, codegen::fusedKernelPtx(call.op, kKernelName));
  cudaLibrary_t library = nullptr;
  CLEAVE_TRY(cudaStatus(cudaLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                        "fused: loading the kernel's PTX"));
  cudaKernel_t kernel = nullptr;
  CLEAVE_TRY(cudaStatus(cudaLibraryGetKernel(&kernel, library, kKernelName), "fused: finding the kernel in its PTX"));
  const LoadedKernel loaded{kernel, spec.along_last_axis ? spec.dims.back() : 0, spec.summed_result};
  kernels.emplace(key, loaded);
  return loaded;
}

Status fusedKernel(const KernelCall& call, CudaContext& context) {
  CLEAVE_ASSIGN_OR_RETURN(LoadedKernel loaded, loadedKernel(call));
  const int64_t numel = call.op.results[0].numel();
  const int64_t count = loaded.row_length > 0 ? numel / loaded.row_length : numel;
  // Kernel parameters: every operand pointer, every result pointer but the column sums', then the
  // element count.
  std::vector<const void*> pointers(call.inputs.begin(), call.inputs.end());
  for (size_t r = 0; r < call.outputs.size(); ++r)
    if (loaded.summed_result[r] < 0) pointers.push_back(call.outputs[r]);
  std::vector<void*> args;
  for (const void*& pointer : pointers) args.push_back(static_cast<void*>(&pointer));
  int64_t elements = count;
  args.push_back(&elements);
  // A thread per element, or a warp per row (kThreadsPerBlock is a multiple of a warp).
  const int64_t threads = loaded.row_length > 0 ? count * codegen::kWarpLanes : count;
  const int64_t blocks = std::min(kMaxBlocks, (threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
  if (count > 0)
    CLEAVE_TRY(cudaStatus(cudaLaunchKernel(reinterpret_cast<const void*>(loaded.kernel), dim3(static_cast<unsigned>(blocks)),
                                         dim3(kThreadsPerBlock), args.data(), 0, context.compute()),
                        "fused: kernel launch"));
  // Column sums: the reduce_sum kernel over the result each sums, on the same stream.
  for (size_t r = 0; r < call.outputs.size(); ++r) {
    if (loaded.summed_result[r] < 0) continue;
    const TensorType& summed = call.op.results[static_cast<size_t>(loaded.summed_result[r])];
    std::vector<int64_t> axes(summed.shape.size() - 1);
    for (size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<int64_t>(d);
    const AttrMap attrs{{"axes", axes}, {"keepdims", int64_t{0}}};
    const std::vector<TensorType> operand{summed}, result{call.op.results[r]};
    const void* input = call.outputs[static_cast<size_t>(loaded.summed_result[r])];
    void* output = call.outputs[r];
    const KernelCall sum{OpContext{opDef(OpId::reduce_sum), operand, result, attrs}, std::span(&input, 1),
                         std::span(&output, 1), call.threads};
    CLEAVE_TRY(findCudaKernel(OpId::reduce_sum)(sum, context));
  }
  return Status::ok();
}

}  // namespace

void registerFusedKernels(CudaKernelTable& table) { table[static_cast<int>(OpId::fused)] = fusedKernel; }

}  // namespace cleave::runtime::cuda
