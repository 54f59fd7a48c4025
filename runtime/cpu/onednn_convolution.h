// f32 conv2d (also fused_conv2d), conv2d_grad_input and conv2d_grad_weight through oneDNN (Debian's libdnnl): its
// direct JIT convolutions on blocked layouts, with the plan's NCHW/OIHW buffers reordered in and out;
// a conv2d with tiny output planes (at most 4 pixels) as one oneDNN matmul over the whole batch.
// Only this file's source includes oneDNN's headers.
#pragma once

#include <optional>

#include "runtime/device/kernel.h"

namespace cleave::runtime::cpu {

// Which implementation runs f32 convolutions, from CLEAVE_CPU_CONVOLUTION (read once): "onednn"
// (the default) or "im2col" (im2col + OpenBLAS GEMMs, as before oneDNN; also what f64 and the
// depthwise direct loops use). Any other value is an error reported at the first convolution.
enum class ConvolutionImplementation { kOneDnn, kIm2colGemm };
Expected<ConvolutionImplementation> chosenConvolutionImplementation();

// Runs a conv2d, fused_conv2d, conv2d_grad_input or conv2d_grad_weight call on f32 tensors through
// oneDNN (fused_conv2d's residual add and relu as post-ops); nullopt when oneDNN has no
// implementation for its shapes, and for a fused_conv2d that would run as the batched matmul (the
// caller then runs its own, or the conv2d and then the epilogue). The oneDNN primitives are made at
// a shape's first call and kept per thread, so that later calls only reorder and run.
std::optional<Status> runOneDnnConvolution(const KernelCall& call);

}  // namespace cleave::runtime::cpu
