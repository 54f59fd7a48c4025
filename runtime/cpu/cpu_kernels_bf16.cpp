// bf16 for the CPU kernels of the ops mixed precision runs in bf16 (matmul, gemm, conv2d, their
// gradients, the bias gradient's reduce_sum): bf16 operands are widened to f32, the f32 kernel runs
// (OpenBLAS sgemm: the products of bf16 values are exact in f32 and accumulate in f32, as
// cblas_sbgemm's), and f32 results are rounded to bf16 (nearest, ties to even).
#include <memory>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/device/element_access.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element of a conversion (for parallelFor).
constexpr int64_t kConversionWork = 1;

// bf16 bits to f32 (exact) and f32 to bf16 bits (nearest, ties to even), over threads.
void widen(const uint16_t* bits, float* values, int64_t n, int threads) {
  parallelFor(n, threads, kConversionWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) values[i] = bfloat16ToFloat(bits[i]);
  });
}

void narrow(const float* values, uint16_t* bits, int64_t n, int threads) {
  parallelFor(n, threads, kConversionWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) bits[i] = floatToBfloat16(values[i]);
  });
}

// The f32 kernels the bf16 ones wrap, by op id.
CpuKernelTable& wrappedKernels() {
  static CpuKernelTable kernels{};
  return kernels;
}

// Steps: 1. widen bf16 operands into f32 copies; 2. run the f32 kernel into f32 results; 3. round
// those into the bf16 results. Calls without bf16 go straight to the f32 kernel.
Status viaF32(CpuKernel f32_kernel, const KernelCall& call) {
  bool has_bf16 = false;
  for (const TensorType& type : call.op.operands) has_bf16 = has_bf16 || type.dtype == DType::kBF16;
  for (const TensorType& type : call.op.results) has_bf16 = has_bf16 || type.dtype == DType::kBF16;
  if (!has_bf16) return f32_kernel(call);
  // 1. Operands.
  std::vector<TensorType> operand_types(call.op.operands.begin(), call.op.operands.end());
  std::vector<TensorType> result_types(call.op.results.begin(), call.op.results.end());
  std::vector<const void*> inputs(call.inputs.begin(), call.inputs.end());
  std::vector<void*> outputs(call.outputs.begin(), call.outputs.end());
  // Scratch left uninitialised (every element is written before it is read).
  std::vector<std::unique_ptr<float[]>> widened(operand_types.size()), wide_results(result_types.size());
  for (size_t i = 0; i < operand_types.size(); ++i) {
    if (operand_types[i].dtype != DType::kBF16) continue;
    widened[i].reset(new float[static_cast<size_t>(operand_types[i].numel())]);
    widen(static_cast<const uint16_t*>(inputs[i]), widened[i].get(), operand_types[i].numel(), call.threads);
    inputs[i] = widened[i].get();
    operand_types[i].dtype = DType::kF32;
  }
  for (size_t r = 0; r < result_types.size(); ++r) {
    if (result_types[r].dtype != DType::kBF16) continue;
    wide_results[r].reset(new float[static_cast<size_t>(result_types[r].numel())]);
    outputs[r] = wide_results[r].get();
    result_types[r].dtype = DType::kF32;
  }
  // 2. The f32 kernel.
  KernelCall wide{OpContext{call.op.def, operand_types, result_types, call.op.attrs}, inputs, outputs, call.threads};
  CLEAVE_TRY(f32_kernel(wide));
  // 3. Results.
  for (size_t r = 0; r < result_types.size(); ++r) {
    if (!wide_results[r]) continue;
    narrow(wide_results[r].get(), static_cast<uint16_t*>(call.outputs[r]), result_types[r].numel(), call.threads);
  }
  return Status::ok();
}

template <OpId kOp>
Status bf16ViaF32Kernel(const KernelCall& call) {
  return viaF32(wrappedKernels()[static_cast<int>(kOp)], call);
}

template <OpId kOp>
void wrap(CpuKernelTable& table) {
  wrappedKernels()[static_cast<int>(kOp)] = table[static_cast<int>(kOp)];
  table[static_cast<int>(kOp)] = bf16ViaF32Kernel<kOp>;
}

}  // namespace

void registerBf16Kernels(CpuKernelTable& table) {
  wrap<OpId::matmul>(table);
  wrap<OpId::gemm>(table);
  wrap<OpId::conv2d>(table);
  wrap<OpId::conv2d_grad_input>(table);
  wrap<OpId::conv2d_grad_weight>(table);
  wrap<OpId::reduce_sum>(table);
}

}  // namespace cleave::runtime::cpu
