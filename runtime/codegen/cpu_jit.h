// Fused kernels for the host CPU: LLVM IR from runtime/codegen/fused_kernel_ir.h, optimised for
// this CPU (its vector width and instruction set) and compiled by ORC's LLJIT, once per process.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave::runtime::codegen {

// A compiled fused kernel: computes result elements [begin, end) of its node (row-major).
using FusedCpuFunction = void (*)(const void* const* operands, void* const* results, int64_t begin, int64_t end);

// A compiled fused kernel and how its ranges must be cut.
struct HostFusedKernel {
  FusedCpuFunction function = nullptr;
  int64_t row_length = 0;  // > 0: the body ends along the last axis; ranges hold whole rows of this many
  // With per-column results (column sums, layer_norm_grad's dscale and dbias): the columns (ranges
  // hold whole rows of this many), and which results they are (their pointers are double[columns]
  // of partial sums).
  int64_t columns = 0;
  std::vector<bool> per_column;
  bool total_sum = false;  // the one result is a total sum: its columns' doubles are added up too
  int64_t numel = 0;  // elements of the iteration space (FusedKernelSpec::numel)
};

// The compiled kernel of fused node `ctx`, compiling it on first use. Kernels are cached by their
// body and operand types (fusedKernelKey) and shared by every thread and rank of the process.
// Errors: an invalid body (kBadInput), LLVM failing (kInternal, with LLVM's message).
Expected<HostFusedKernel> hostFusedKernel(const OpContext& ctx);

// How many fused kernels this process has compiled (for tests and traces).
int64_t hostFusedKernelsCompiled();

}  // namespace cleave::runtime::codegen
