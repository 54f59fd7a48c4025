// A fused_matmul as calls of the transpose, matmul and add kernels: each permuted operand copied into
// a temporary, the plain matmul, the bias added, the product transposed into the result. The CPU's path where oneDNN
// does not take the call (other dtypes, broadcast batch dims) and, for now, the GPU's.
#pragma once

#include <functional>

#include "ir/op_table.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime {

// `temporary(bytes)` gives memory that stays valid until the caller releases it, after this returns;
// `run(op, call)` runs one kernel call of transpose, matmul or add. Stops at the first error.
Status runFusedMatmulStepwise(const KernelCall& fused, const std::function<Expected<void*>(int64_t bytes)>& temporary,
                              const std::function<Status(OpId op, const KernelCall& call)>& run);

}  // namespace cleave::runtime
