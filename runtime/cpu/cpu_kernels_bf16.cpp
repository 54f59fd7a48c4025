// bf16 for the CPU kernels of the ops mixed precision runs in bf16 (matmul, gemm, conv2d, their
// gradients, the bias gradient's reduce_sum): bf16 operands are widened to f32, the f32 kernel runs
// (OpenBLAS sgemm: the products of bf16 values are exact in f32 and accumulate in f32, as
// cblas_sbgemm's), and f32 results are rounded to bf16 (nearest, ties to even).
#include <cstring>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element of a conversion (for parallelFor).
constexpr int64_t kConversionWork = 1;

// bf16 bits to f32 (exact) and f32 to bf16 bits (nearest, ties to even; NaN stays a quiet NaN),
// in loops the compiler vectorises.
void widen(const uint16_t* bits, float* values, int64_t n, int threads) {
  parallelFor(n, threads, kConversionWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
      std::memcpy(&values[i], &word, sizeof word);
    }
  });
}

void narrow(const float* values, uint16_t* bits, int64_t n, int threads) {
  parallelFor(n, threads, kConversionWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      uint32_t word;
      std::memcpy(&word, &values[i], sizeof word);
      const bool nan = (word & 0x7fffffffu) > 0x7f800000u;
      const uint32_t rounded = (word + 0x7fffu + ((word >> 16) & 1u)) >> 16;
      bits[i] = static_cast<uint16_t>(nan ? (word >> 16) | 0x40u : rounded);
    }
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
  std::vector<std::vector<float>> widened(operand_types.size()), wide_results(result_types.size());
  for (size_t i = 0; i < operand_types.size(); ++i) {
    if (operand_types[i].dtype != DType::kBF16) continue;
    widened[i].resize(static_cast<size_t>(operand_types[i].numel()));
    widen(static_cast<const uint16_t*>(inputs[i]), widened[i].data(), operand_types[i].numel(), call.threads);
    inputs[i] = widened[i].data();
    operand_types[i].dtype = DType::kF32;
  }
  for (size_t r = 0; r < result_types.size(); ++r) {
    if (result_types[r].dtype != DType::kBF16) continue;
    wide_results[r].resize(static_cast<size_t>(result_types[r].numel()));
    outputs[r] = wide_results[r].data();
    result_types[r].dtype = DType::kF32;
  }
  // 2. The f32 kernel.
  KernelCall wide{OpContext{call.op.def, operand_types, result_types, call.op.attrs}, inputs, outputs, call.threads};
  CLEAVE_TRY(f32_kernel(wide));
  // 3. Results.
  for (size_t r = 0; r < result_types.size(); ++r) {
    if (wide_results[r].empty()) continue;
    narrow(wide_results[r].data(), static_cast<uint16_t*>(call.outputs[r]), static_cast<int64_t>(wide_results[r].size()),
           call.threads);
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
