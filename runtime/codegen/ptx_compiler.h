// Fused kernels for NVIDIA GPUs: the IR of runtime/codegen/fused_kernel_ir.h through LLVM's NVPTX
// backend to PTX text, which the CUDA driver loads (and compiles for the device it runs on).
#pragma once

#include <string>

#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave::runtime::codegen {

// The GPU architecture PTX is generated for. LLVM 14's NVPTX backend knows up to sm_86 and PTX 7.5;
// PTX for sm_80 runs on every later GPU (H100/H200 included): the driver compiles it for the device.
inline constexpr const char* kFusedPtxArchitecture = "sm_80";

// PTX of fused node `ctx` as one kernel named `kernel_name` (see buildFusedKernelModule, kNvptx).
// Errors: an invalid body, a step with no GPU code, LLVM failing.
Expected<std::string> fusedKernelPtx(const OpContext& ctx, const std::string& kernel_name);

}  // namespace cleave::runtime::codegen
