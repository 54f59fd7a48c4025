// Linear algebra ops: matmul (batched, broadcasting) and gemm (2-D with scaling and an added c).
#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

// Where m, k and n sit in a matrix operand's last two dims, given its transpose flag.
struct MatrixDims {
  int64_t rows;        // m for a, k for b
  int64_t cols;        // k for a, n for b
  int rows_dim;        // -2, or -1 when transposed
  int cols_dim;        // -1, or -2 when transposed
};

MatrixDims matrixDims(const Shape& shape, bool transposed) {
  size_t r = shape.size();
  if (transposed) return {shape[r - 1], shape[r - 2], -1, -2};
  return {shape[r - 2], shape[r - 1], -2, -1};
}

// Checks a and b (rank >= 2, one numeric dtype, matching k) and the transpose flags; gives
// op(a)'s [m,k] and op(b)'s [k,n].
Status checkMatrixOperands(const OpContext& ctx, MatrixDims& a, MatrixDims& b) {
  CLEAVE_TRY(requireRank(ctx, 0, 2));
  CLEAVE_TRY(requireRank(ctx, 1, 2));
  CLEAVE_TRY(requireNumeric(ctx, 0));
  CLEAVE_TRY(requireSameDType(ctx, 1, 0));
  CLEAVE_TRY(requireFlag(ctx, "transpose_a"));
  CLEAVE_TRY(requireFlag(ctx, "transpose_b"));
  a = matrixDims(ctx.operands[0].shape, ctx.getInt("transpose_a") == 1);
  b = matrixDims(ctx.operands[1].shape, ctx.getInt("transpose_b") == 1);
  if (a.cols != b.rows)
    return operandShapeError(ctx, 1,
                             "its dim " + std::to_string(b.rows_dim) + " (" + std::to_string(b.rows) +
                                 ") must equal operand 0's dim " + std::to_string(a.cols_dim) + " (" +
                                 std::to_string(a.cols) + ")");
  return Status::ok();
}

Shape batchDims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }

Expected<std::vector<TensorType>> matmulShape(const OpContext& ctx) {
  MatrixDims a, b;
  CLEAVE_TRY(checkMatrixOperands(ctx, a, b));
  Shape batch_a = batchDims(ctx.operands[0].shape), batch_b = batchDims(ctx.operands[1].shape), batch;
  if (!broadcastShapes(batch_a, batch_b, batch))
    return operandShapeError(ctx, 1,
                             "its batch dims " + shapeStr(batch_b) + " do not broadcast with operand 0's batch dims " +
                                 shapeStr(batch_a));
  batch.push_back(a.rows);
  batch.push_back(b.cols);
  return std::vector<TensorType>{{ctx.operands[0].dtype, batch}};
}

Expected<std::vector<TensorType>> gemmShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 2, 2));
  CLEAVE_TRY(requireRank(ctx, 1, 2, 2));
  MatrixDims a, b;
  CLEAVE_TRY(checkMatrixOperands(ctx, a, b));
  Shape mn = {a.rows, b.cols};
  if (ctx.operands.size() == 3) {
    CLEAVE_TRY(requireSameDType(ctx, 2, 0));
    Shape broadcast;  // c broadcasts one way: to [m,n], never growing it
    if (ctx.operands[2].rank() > 2 || !broadcastShapes(ctx.operands[2].shape, mn, broadcast) || broadcast != mn)
      return operandShapeError(ctx, 2, "which does not broadcast to the result [m,n] = " + shapeStr(mn));
  }
  return std::vector<TensorType>{{ctx.operands[0].dtype, mn}};
}

// matmul and gemm: 2·m·n·k FLOPs per batch element, plus (gemm with c) 2·m·n to scale and add c.
OpCost matrixProductCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const Shape& a = ctx.operands[0].shape;
  double k = static_cast<double>(ctx.getInt("transpose_a") ? a[a.size() - 2] : a.back());
  double result_numel = static_cast<double>(results[0].numel());  // batch·m·n
  double flops = 2 * result_numel * k + (ctx.operands.size() == 3 ? 2 * result_numel : 0);
  return {flops, operandAndResultBytes(ctx, results)};
}

// Factors of a matrix product: batch dims (pass-through), m and n (pass-through), k (reduction).
// Factor order is batch..., m, k, n, so a plain matmul prints "([i,j],[j,k])->([i,k]) {j=reduction}".
// For gemm with c and k split, each shard's partial product must not add beta·c: the lowering adds c
// once (after the all-reduce, or on one shard only).
ShardingRule matrixProductRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addContraction(ctx.getInt("transpose_a") == 1, ctx.getInt("transpose_b") == 1);
  rule.mapBroadcastOperand(2, 0);  // gemm's c, when present, broadcasts against [m, n]
  return rule.build();
}

}  // namespace

void addLinearAlgebraOps(std::vector<OpDef>& table) {
  table.push_back(OpDef{.id = OpId::matmul,
                        .name = "matmul",
                        .summary = "batched matrix product op(a)·op(b); batch dims broadcast",
                        .min_operands = 2,
                        .max_operands = 2,
                        .attrs = {optionalInt("transpose_a", 0), optionalInt("transpose_b", 0)},
                        .shape = checkedShapeRule<matmulShape>,
                        .cost = matrixProductCost,
                        .sharding = matrixProductRule,
                        .weight_operand = 1});
  table.push_back(OpDef{.id = OpId::gemm,
                        .name = "gemm",
                        .summary = "alpha·op(a)·op(b) + beta·c for 2-D a and b",
                        .min_operands = 2,
                        .max_operands = 3,
                        .attrs = {optionalFloat("alpha", 1.0), optionalFloat("beta", 1.0), optionalInt("transpose_a", 0),
                                  optionalInt("transpose_b", 0)},
                        .shape = checkedShapeRule<gemmShape>,
                        .cost = matrixProductCost,
                        .sharding = matrixProductRule});
}

}  // namespace cleave::ops
