// Op ids of the linear algebra family (matmul, gemm); the ops are defined in ir/ops/linear_algebra.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_LINEAR_ALGEBRA_OPS(X) \
  X(matmul, "matmul") \
  X(gemm, "gemm")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_LINEAR_ALGEBRA_OPS to `table`.
void addLinearAlgebraOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
