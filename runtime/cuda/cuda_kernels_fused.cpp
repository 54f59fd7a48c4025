// The CUDA kernel of fused nodes: PTX from LLVM's NVPTX backend (runtime/codegen/ptx_compiler.h),
// loaded once per node kind and device with the runtime's library API, launched as a grid-stride loop.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ir/ops/fused_body.h"
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
  int summed_operand = -1;          // a lone column sum's operand (no kernel: reduce_sum's runs it)
  // A total sum (no kernel: totalSumStepwise runs it): the body of its chain, returning the summed
  // step, and that step's type; else empty.
  std::string total_sum_chain;
  TensorType total_summed_type;
};

// The loaded kernel of a fused node on the current device, loading it on first use (entries live
// as long as the process: map nodes do not move).
Expected<const LoadedKernel*> loadedKernel(const KernelCall& call) {
  static std::mutex mutex;
  static std::map<std::string, LoadedKernel> kernels;
  int device = 0;
  CLEAVE_TRY(cudaStatus(cudaGetDevice(&device), "fused: cudaGetDevice"));
  const std::string key = codegen::fusedKernelKey(call.op) + "|device " + std::to_string(device);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = kernels.find(key); it != kernels.end()) return &it->second;
  CLEAVE_ASSIGN_OR_RETURN(codegen::FusedKernelSpec spec, codegen::fusedKernelSpec(call.op));
  LoadedKernel loaded{nullptr, spec.along_last_axis ? spec.dims.back() : 0, spec.summed_result, spec.summed_operand};
  if (spec.total_summed_step >= 0) {
    const FusedBody chain{std::vector<FusedStep>(spec.body.steps.begin(), spec.body.steps.end() - 1),
                          {spec.total_summed_step}};
    loaded.total_sum_chain = printFusedBody(chain);
    loaded.total_summed_type = spec.steps[static_cast<size_t>(spec.total_summed_step)];
  } else if (spec.summed_operand < 0) {  // a lone column sum has no kernel of its own
    CLEAVE_ASSIGN_OR_RETURN(std::string ptx, codegen::fusedKernelPtx(call.op, kKernelName));
    cudaLibrary_t library = nullptr;
    CLEAVE_TRY(cudaStatus(cudaLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                          "fused: loading the kernel's PTX"));
    CLEAVE_TRY(cudaStatus(cudaLibraryGetKernel(&loaded.kernel, library, kKernelName), "fused: finding the kernel in its PTX"));
  }
  return &kernels.emplace(key, std::move(loaded)).first->second;
}

Status fusedKernel(const KernelCall& call, CudaContext& context);

// A body ending in a row gradient (layer_norm_grad, rms_norm_grad), which has no GPU code yet: the
// steps before it as a fused node of their own (returning what the node returns of them, and the
// gradient's dy, into a stream-ordered temporary where the node does not return it), then the
// gradient op's kernel.
// Correct, not faster than unfused.
Status rowGradientStepwise(const KernelCall& call, CudaContext& context, const FusedBody& body) {
  size_t row_step = body.steps.size() - 1;
  while (row_step > 0 && body.steps[row_step].result > 0) --row_step;
  const FusedStep& gradient = body.steps[row_step];
  auto resultOf = [&](int step) {
    return static_cast<size_t>(std::find(body.returned.begin(), body.returned.end(), step) - body.returned.begin());
  };
  const TensorType& row_type = call.op.results[resultOf(static_cast<int>(row_step))];
  const void* dy = nullptr;
  void* temporary = nullptr;
  if (gradient.args[0].kind == FusedArg::Kind::kOperand) {
    dy = call.inputs[gradient.args[0].index];
  } else {
    FusedBody chain{std::vector<FusedStep>(body.steps.begin(), body.steps.begin() + static_cast<int64_t>(row_step)), {}};
    std::vector<TensorType> chain_results;
    std::vector<void*> chain_outputs;
    for (size_t r = 0; r < body.returned.size(); ++r)
      if (static_cast<size_t>(body.returned[r]) < row_step) {
        chain.returned.push_back(body.returned[r]);
        chain_results.push_back(call.op.results[r]);
        chain_outputs.push_back(call.outputs[r]);
      }
    const int dy_step = gradient.args[0].index;
    if (const size_t r = resultOf(dy_step); r < body.returned.size()) {
      dy = call.outputs[r];
    } else {
      CLEAVE_TRY(cudaStatus(cudaMallocAsync(&temporary, static_cast<size_t>(row_type.bytes()) + 1, context.compute()),
                            "fused: a temporary for a row gradient's dy"));
      dy = temporary;
      chain.returned.push_back(dy_step);
      chain_results.push_back(row_type);
      chain_outputs.push_back(temporary);
    }
    const std::vector<TensorType> chain_operands(call.op.operands.begin(), call.op.operands.begin() + chain.operandCount());
    const AttrMap attrs{{"body", printFusedBody(chain)}};
    const KernelCall chain_call{OpContext{opDef(OpId::fused), chain_operands, chain_results, attrs},
                                call.inputs.subspan(0, chain_operands.size()), chain_outputs, call.threads};
    if (Status status = fusedKernel(chain_call, context); !status) {
      if (temporary) (void)cudaFreeAsync(temporary, context.compute());
      return status;
    }
  }
  const std::vector<TensorType> operands{row_type, call.op.operands[gradient.args[1].index],
                                         call.op.operands[gradient.args[2].index]};
  std::vector<TensorType> results;
  std::vector<void*> outputs;
  for (size_t k = row_step; k < body.steps.size(); ++k) {  // dx, dscale[, dbias]
    const size_t r = resultOf(static_cast<int>(k));
    results.push_back(call.op.results[r]);
    outputs.push_back(call.outputs[r]);
  }
  const void* inputs[] = {dy, call.inputs[gradient.args[1].index], call.inputs[gradient.args[2].index]};
  const KernelCall gradient_call{OpContext{opDef(gradient.op), operands, results, gradient.attrs}, inputs,
                                 outputs, call.threads};
  Status status = findCudaKernel(gradient.op)(gradient_call, context);
  // Freed in stream order: after the kernels above have run.
  if (temporary) (void)cudaFreeAsync(temporary, context.compute());
  return status;
}

// The reduce_sum kernel over every dim of `summed` but the last into `output`, on the call's stream.
Status sumColumns(const KernelCall& call, CudaContext& context, const TensorType& summed, const void* input, void* output,
                  const TensorType& result) {
  std::vector<int64_t> axes(summed.shape.size() - 1);
  for (size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<int64_t>(d);
  const AttrMap attrs{{"axes", axes}, {"keepdims", int64_t{0}}};
  const std::vector<TensorType> operand{summed}, results{result};
  const KernelCall sum{OpContext{opDef(OpId::reduce_sum), operand, results, attrs}, std::span(&input, 1),
                       std::span(&output, 1), call.threads};
  return findCudaKernel(OpId::reduce_sum)(sum, context);
}

// A body ending in a total sum, which has no GPU code: the chain as a fused node of its own,
// returning the summed step into a stream-ordered temporary, then the reduce_sum kernel over all
// its dims. Correct, and reads the summed tensor once more than the host's code.
Status totalSumStepwise(const KernelCall& call, CudaContext& context, const LoadedKernel& loaded) {
  const TensorType& summed = loaded.total_summed_type;
  void* temporary = nullptr;
  CLEAVE_TRY(cudaStatus(cudaMallocAsync(&temporary, static_cast<size_t>(summed.bytes()) + 1, context.compute()),
                        "fused: a temporary for a total sum's summands"));
  const std::vector<TensorType> chain_results{summed};
  const AttrMap chain_attrs{{"body", loaded.total_sum_chain}};
  const KernelCall chain_call{OpContext{opDef(OpId::fused), call.op.operands, chain_results, chain_attrs}, call.inputs,
                              std::span(&temporary, 1), call.threads};
  Status status = fusedKernel(chain_call, context);
  if (status) {
    const void* input = temporary;
    const AttrMap sum_attrs{{"keepdims", int64_t{0}}};
    const KernelCall sum{OpContext{opDef(OpId::reduce_sum), chain_results, call.op.results, sum_attrs}, std::span(&input, 1),
                         call.outputs, call.threads};
    status = findCudaKernel(OpId::reduce_sum)(sum, context);
  }
  // Freed in stream order: after the kernels above have run.
  (void)cudaFreeAsync(temporary, context.compute());
  return status;
}

Status fusedKernel(const KernelCall& call, CudaContext& context) {
  if (const std::string& text = call.op.getString("body");  // the last statement (fused_body.h)
      text.find("layer_norm_grad(") != std::string::npos || text.find("rms_norm_grad(") != std::string::npos) {
    auto body = parseFusedBody(call.op.getString("body"));
    if (!body) return body.status().withContext("fused: ");
    return rowGradientStepwise(call, context, *body);
  }
  CLEAVE_ASSIGN_OR_RETURN(const LoadedKernel* found, loadedKernel(call));
  const LoadedKernel& loaded = *found;
  if (!loaded.total_sum_chain.empty()) return totalSumStepwise(call, context, loaded);
  if (loaded.summed_operand >= 0) {  // a lone column sum: reduce_sum's kernel over its operand
    const size_t k = static_cast<size_t>(loaded.summed_operand);
    return sumColumns(call, context, call.op.operands[k], call.inputs[k], call.outputs[0], call.op.results[0]);
  }
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
    const size_t summed = static_cast<size_t>(loaded.summed_result[r]);
    CLEAVE_TRY(sumColumns(call, context, call.op.results[summed], call.outputs[summed], call.outputs[r], call.op.results[r]));
  }
  return Status::ok();
}

}  // namespace

void registerFusedKernels(CudaKernelTable& table) { table[static_cast<int>(OpId::fused)] = fusedKernel; }

}  // namespace cleave::runtime::cuda
