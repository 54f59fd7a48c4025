// Op ids of the elementwise family (arithmetic, comparisons, unary math, cast, where, ...); the ops are defined in ir/ops/elementwise.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_ELEMENTWISE_OPS(X) \
  X(add, "add") \
  X(sub, "sub") \
  X(mul, "mul") \
  X(div, "div") \
  X(pow, "pow") \
  X(equal, "equal") \
  X(less, "less") \
  X(less_equal, "less_equal") \
  X(greater, "greater") \
  X(greater_equal, "greater_equal") \
  X(sqrt, "sqrt") \
  X(exp, "exp") \
  X(log, "log") \
  X(neg, "neg") \
  X(erf, "erf") \
  X(sin, "sin") \
  X(cos, "cos") \
  X(tan, "tan") \
  X(asin, "asin") \
  X(acos, "acos") \
  X(atan, "atan") \
  X(sinh, "sinh") \
  X(cosh, "cosh") \
  X(asinh, "asinh") \
  X(acosh, "acosh") \
  X(atanh, "atanh") \
  X(floor, "floor") \
  X(ceil, "ceil") \
  X(round, "round") \
  X(tanh, "tanh") \
  X(sigmoid, "sigmoid") \
  X(relu, "relu") \
  X(gelu, "gelu") \
  X(clip, "clip") \
  X(cast, "cast") \
  X(where, "where") \
  X(dropout, "dropout") \
  X(identity, "identity") \
  X(detach, "detach")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_ELEMENTWISE_OPS to `table`.
void addElementwiseOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
