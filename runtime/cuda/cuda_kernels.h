// CUDA kernels: the GPU implementations of ops, keyed by op id (the CPU's are in runtime/device/kernel.h).
// Only files under runtime/cuda include this header.
#pragma once

#include "ir/op_table.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime {

// A CUDA kernel: enqueues the op on context.compute() (inputs and outputs are device pointers
// into the arena; the aliasing rules of KernelCall hold) and returns without synchronizing.
// Errors are launch or library errors (kRuntime); call.threads is ignored.
using CudaKernel = Status (*)(const KernelCall& call, CudaContext& context);

// The CUDA kernel for `op`, or nullptr when there is none.
CudaKernel findCudaKernel(OpId op);

}  // namespace cleave::runtime
