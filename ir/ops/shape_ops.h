// Op ids of the shape family (shape and data movement); the ops are defined in ir/ops/shape_ops.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_SHAPE_OPS(X) \
  X(reshape, "reshape") \
  X(flatten, "flatten") \
  X(transpose, "transpose") \
  X(concat, "concat") \
  X(split, "split") \
  X(slice, "slice") \
  X(gather, "gather") \
  X(gather_elements, "gather_elements") \
  X(gather_nd, "gather_nd") \
  X(scatter_elements, "scatter_elements") \
  X(scatter_nd, "scatter_nd") \
  X(expand, "expand") \
  X(squeeze, "squeeze") \
  X(unsqueeze, "unsqueeze") \
  X(trilu, "trilu") \
  X(constant, "constant")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_SHAPE_OPS to `table`.
void addShapeOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
