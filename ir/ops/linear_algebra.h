// Op ids of the linear algebra family (matmul, gemm, fused_matmul); the ops are defined in
// ir/ops/linear_algebra.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_LINEAR_ALGEBRA_OPS(X) \
  X(matmul, "matmul") \
  X(gemm, "gemm") \
  X(fused_matmul, "fused_matmul")

namespace cleave {
struct OpDef;
struct OpContext;
namespace ops {
// Appends the definition of every op in CLEAVE_LINEAR_ALGEBRA_OPS to `table`.
void addLinearAlgebraOps(std::vector<OpDef>& table);

// A fused_matmul as the plain matmul inside it: the permutations it reads its operands and writes
// its result through (each whole: the identity where the attribute is empty) and the types the
// matmul sees. Result dim i of transpose(x, perm) is x's dim perm[i].
struct FusedMatmulLayout {
  std::vector<int64_t> perm_a, perm_b, perm_result;
  std::array<TensorType, 2> operands;  // transpose(a, perm_a) and transpose(b, perm_b): the matmul's
  TensorType product;  // the matmul's result; fused_matmul's is transpose(product, perm_result)
};
// `ctx` is a fused_matmul's (operand types and attributes); an error names the attribute or operand
// at fault.
Expected<FusedMatmulLayout> fusedMatmulLayout(const OpContext& ctx);
}  // namespace ops
}  // namespace cleave
