// The CPU kernel table: one kernel per op id, filled by one registration function per op family file.
//
// Threads: a kernel parallelises with OpenMP over KernelCall::threads, GEMMs included; it calls
// OpenBLAS single-threaded, and the table's first use sets openblas_set_num_threads(1). Callers
// should leave it so: with OpenBLAS threaded, the kernels leave GEMM parallelism to OpenBLAS (see
// cpu_gemm.h) and two thread pools, each spinning while the other works, share the cores.
#pragma once

#include <array>

#include "runtime/device/kernel.h"

namespace cleave::runtime::cpu {

// Kernels indexed by OpId; nullptr where an op has none.
using CpuKernelTable = std::array<CpuKernel, kNumOps>;

// Each family file (runtime/cpu_kernels_*.cpp) puts its kernels into the table.
void registerElementwiseKernels(CpuKernelTable& table);     // arithmetic, comparisons, unary math, cast, where
void registerLinearAlgebraKernels(CpuKernelTable& table);   // matmul, gemm
void registerReductionKernels(CpuKernelTable& table);       // reduce_*, softmax, layer_norm, batch_norm
void registerConvolutionKernels(CpuKernelTable& table);     // conv2d and its two gradients
void registerPoolingKernels(CpuKernelTable& table);         // max/avg/global pools and their gradients
void registerShapeKernels(CpuKernelTable& table);           // data movement: reshape ... constant
void registerLossKernels(CpuKernelTable& table);            // softmax_cross_entropy, mse
void registerGradientKernels(CpuKernelTable& table);        // the remaining *_grad ops
void registerOptimizerKernels(CpuKernelTable& table);       // sgd_update, adamw_update
void registerFusedKernels(CpuKernelTable& table);           // fused: JIT-compiled with LLVM
// Last: bf16 for matmul, gemm, conv2d, its gradients and reduce_sum, around their f32 kernels.
void registerBf16Kernels(CpuKernelTable& table);

}  // namespace cleave::runtime::cpu
