// Op ids of the convolution family (conv2d and pooling, NCHW; resize; conv2d with a fused epilogue);
// the ops are defined in ir/ops/convolution.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_CONVOLUTION_OPS(X) \
  X(conv2d, "conv2d") \
  X(max_pool2d, "max_pool2d") \
  X(avg_pool2d, "avg_pool2d") \
  X(global_avg_pool, "global_avg_pool") \
  X(resize, "resize") \
  X(fused_conv2d, "fused_conv2d")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_CONVOLUTION_OPS to `table`.
void addConvolutionOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
