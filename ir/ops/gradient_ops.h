// Op ids of the gradient family (the backward ops autodiff emits); the ops are defined in ir/ops/gradient_ops.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_GRADIENT_OPS(X) \
  X(relu_grad, "relu_grad") \
  X(gelu_grad, "gelu_grad") \
  X(tanh_grad, "tanh_grad") \
  X(sigmoid_grad, "sigmoid_grad") \
  X(softmax_grad, "softmax_grad") \
  X(log_softmax_grad, "log_softmax_grad") \
  X(layer_norm_grad, "layer_norm_grad") \
  X(rms_norm_grad, "rms_norm_grad") \
  X(conv2d_grad_input, "conv2d_grad_input") \
  X(conv2d_grad_weight, "conv2d_grad_weight") \
  X(max_pool2d_grad, "max_pool2d_grad") \
  X(avg_pool2d_grad, "avg_pool2d_grad") \
  X(gather_grad, "gather_grad") \
  X(gather_elements_grad, "gather_elements_grad") \
  X(gather_nd_grad, "gather_nd_grad") \
  X(resize_grad, "resize_grad") \
  X(slice_grad, "slice_grad") \
  X(softmax_cross_entropy_grad, "softmax_cross_entropy_grad")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_GRADIENT_OPS to `table`.
void addGradientOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
