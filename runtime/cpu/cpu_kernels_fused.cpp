// The CPU kernel of fused nodes: the node's JIT-compiled function (runtime/codegen/cpu_jit.h) over
// ranges of result elements, one per thread.
#include <algorithm>
#include <vector>

#include "runtime/codegen/cpu_jit.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"

namespace cleave::runtime::cpu {
namespace {

Status fusedKernel(const KernelCall& call) {
  CLEAVE_ASSIGN_OR_RETURN(codegen::HostFusedKernel kernel, codegen::hostFusedKernel(call.op));
  const std::string& body = call.op.getString("body");
  // Work per element: about four operations per step (a transcendental step does more).
  const int64_t steps = std::max<int64_t>(1, std::count(body.begin(), body.end(), ';'));
  const void* const* inputs = call.inputs.data();
  void* const* outputs = call.outputs.data();
  const int64_t numel = call.op.results[0].numel();
  if (kernel.row_length > 0) {  // whole rows: the body ends along the last axis
    const int64_t row = kernel.row_length;
    parallelFor(numel / row, threadCount(call), 4 * steps * row,
                [&](int64_t begin, int64_t end) { kernel.function(inputs, outputs, begin * row, end * row); });
    return Status::ok();
  }
  parallelFor(numel, threadCount(call), 4 * steps,
              [&](int64_t begin, int64_t end) { kernel.function(inputs, outputs, begin, end); });
  return Status::ok();
}

}  // namespace

void registerFusedKernels(CpuKernelTable& table) { table[static_cast<int>(OpId::fused)] = fusedKernel; }

}  // namespace cleave::runtime::cpu
