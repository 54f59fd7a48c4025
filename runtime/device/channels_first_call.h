// An NHWC conv2d, fused_conv2d or max_pool2d as calls of its NCHW kernel: the image transposed in,
// the result transposed out (the CPU's path for f64 and shapes oneDNN has no kernel for, and the
// GPU's for now). The CPU and CUDA backends run the three calls on their own kernels and buffers.
#pragma once

#include <vector>

#include "runtime/device/kernel.h"

namespace cleave::runtime {

// One transpose between layouts, as a call of the transpose op's kernel.
class LayoutTransposeCall {
 public:
  // `from` (of type `from_type`) into `to`, to NHWC when `to_channels_last`, else to NCHW.
  LayoutTransposeCall(const TensorType& from_type, const void* from, void* to, bool to_channels_last, int threads);
  LayoutTransposeCall(const LayoutTransposeCall&) = delete;  // the call points into this object
  LayoutTransposeCall& operator=(const LayoutTransposeCall&) = delete;
  const KernelCall& call() const { return call_; }

 private:
  TensorType from_type_, to_type_;
  AttrMap attrs_;
  const void* inputs_[1];
  void* outputs_[1];
  KernelCall call_;
};

// The NCHW call of an NHWC call: operand 0 and result 0 NCHW at `image` and `result` (the caller's
// buffers of those sizes), layout NCHW, the rest as in `nhwc`.
class ChannelsFirstCall {
 public:
  ChannelsFirstCall(const KernelCall& nhwc, const void* image, void* result);
  ChannelsFirstCall(const ChannelsFirstCall&) = delete;  // the call points into this object
  ChannelsFirstCall& operator=(const ChannelsFirstCall&) = delete;
  const KernelCall& call() const { return call_; }
  const TensorType& image() const { return operands_[0]; }
  const TensorType& result() const { return results_[0]; }

 private:
  std::vector<TensorType> operands_, results_;
  AttrMap attrs_;
  std::vector<const void*> inputs_;
  std::vector<void*> outputs_;
  KernelCall call_;
};

}  // namespace cleave::runtime
