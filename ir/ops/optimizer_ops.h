// Op ids of the optimizer family (PyTorch update rules); the ops are defined in ir/ops/optimizer_ops.cpp.
#pragma once

#include <cstdint>
#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_OPTIMIZER_OPS(X) \
  X(sgd_update, "sgd_update") \
  X(adamw_update, "adamw_update") \
  X(sgd_matmul_update, "sgd_matmul_update")

namespace cleave {
struct OpDef;
struct OpContext;
namespace ops {
// The operand holding the update's gradient scale, or -1: a scalar the gradient is multiplied by
// before the update (a clipping coefficient, folded in by the fusion pass; PyTorch's fused
// optimizers take one too). It follows the update's own operands: sgd_update(w, g, step, [buf],
// [grad_scale]), adamw_update(w, g, m, v, step, [grad_scale]).
int gradientScaleOperand(const OpContext& c);
// sgd_matmul_update's GEMM: w is [m, n], op(a) [m, k] and op(b) [k, n]; lda and ldb are a's and b's
// dim 1, as row-major BLAS calls take them.
struct SgdMatmulGemm {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0;
  bool transpose_a = false, transpose_b = false;
};
// `c` is a valid sgd_matmul_update's.
SgdMatmulGemm sgdMatmulGemm(const OpContext& c);
// Appends the definition of every op in CLEAVE_OPTIMIZER_OPS to `table`.
void addOptimizerOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
