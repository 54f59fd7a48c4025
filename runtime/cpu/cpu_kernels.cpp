// The CPU kernel table and findCpuKernel.
#include "runtime/cpu/cpu_kernels.h"

#include <cblas.h>

namespace cleave::runtime {
namespace {

const cpu::CpuKernelTable& cpuKernelTable() {
  static const cpu::CpuKernelTable table = [] {
    // The kernels split their GEMMs over OpenMP threads themselves (see cpu_gemm.h).
    openblas_set_num_threads(1);
    cpu::CpuKernelTable t{};
    cpu::registerElementwiseKernels(t);
    cpu::registerLinearAlgebraKernels(t);
    cpu::registerReductionKernels(t);
    cpu::registerConvolutionKernels(t);
    cpu::registerPoolingKernels(t);
    cpu::registerShapeKernels(t);
    cpu::registerLossKernels(t);
    cpu::registerGradientKernels(t);
    cpu::registerOptimizerKernels(t);
    cpu::registerFusedKernels(t);
    cpu::registerBf16Kernels(t);
    return t;
  }();
  return table;
}

}  // namespace

CpuKernel findCpuKernel(OpId op) {
  const int index = static_cast<int>(op);
  if (index < 0 || index >= kNumOps) return nullptr;
  return cpuKernelTable()[index];
}

}  // namespace cleave::runtime
