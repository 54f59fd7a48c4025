// Linear algebra ops: matmul (batched, broadcasting), gemm (2-D with scaling and an added c) and
// fused_matmul (a matmul reading its operands and writing its result through permutations, with an
// optional bias added to each row).
#include <numeric>
#include <utility>

#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"

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

// ---- fused_matmul: transposes and a bias folded into a matmul ----

// Attribute `attr`'s permutation of `rank` dims, the identity when it is empty.
Expected<std::vector<int64_t>> foldedPerm(const OpContext& ctx, std::string_view attr, int64_t rank,
                                          const std::string& rank_of) {
  if (ctx.getInts(attr).empty()) {
    std::vector<int64_t> identity(static_cast<size_t>(rank));
    std::iota(identity.begin(), identity.end(), int64_t{0});
    return identity;
  }
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> perm, resolveAxes(ctx, attr, rank, rank_of));
  if (static_cast<int64_t>(perm.size()) != rank)
    return attrError(ctx, attr, "is " + intsStr(ctx.getInts(attr)) + ", not a permutation of " + rank_of + "'s " +
                                    std::to_string(rank) + " dims");
  return perm;
}

TensorType permuted(const TensorType& type, const std::vector<int64_t>& perm) {
  TensorType out{type.dtype, Shape(perm.size())};
  for (size_t i = 0; i < perm.size(); ++i) out.shape[i] = type.shape[static_cast<size_t>(perm[i])];
  return out;
}

// The plain matmul inside a fused_matmul, as an op context over `layout`'s operand types.
OpContext innerMatmul(const OpContext& ctx, const FusedMatmulLayout& layout, std::span<const TensorType> results) {
  return OpContext{ctx.def, layout.operands, results, ctx.attrs};
}

Expected<std::vector<TensorType>> fusedMatmulShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(FusedMatmulLayout layout, fusedMatmulLayout(ctx));
  return std::vector<TensorType>{permuted(layout.product, layout.perm_result)};
}

// A matmul's FLOPs; the bytes of its operands and result once each (the transposes move none).
OpCost fusedMatmulCost(const OpContext& ctx) {
  auto layout = fusedMatmulLayout(ctx);
  if (!layout) return {};
  OpCost cost = matrixProductCost(innerMatmul(ctx, *layout, {}));
  if (ctx.operands.size() == 3) cost.flops += static_cast<double>(layout->product.numel());  // the bias adds
  cost.bytes = operandAndResultBytes(ctx, std::span<const TensorType>(&layout->product, 1));
  return cost;
}

// The plain matmul's factors, each tensor's dims taken back through its permutation.
ShardingRule fusedMatmulRule(const OpContext& ctx) {
  auto layout = fusedMatmulLayout(ctx);
  if (!layout) return {};
  ShardingRuleBuilder builder(layout->operands, std::span<const TensorType>(&layout->product, 1));
  builder.addContraction(ctx.getInt("transpose_a") == 1, ctx.getInt("transpose_b") == 1);
  ShardingRule rule = builder.build();
  auto unpermute = [](const std::vector<int>& dims, const std::vector<int64_t>& perm) {
    std::vector<int> out(dims.size(), ShardingRule::kNoFactor);
    for (size_t i = 0; i < perm.size(); ++i) out[static_cast<size_t>(perm[i])] = dims[i];
    return out;
  };
  if (ctx.operands.size() == 3) rule.operand_dims.push_back({rule.result_dims[0].back()});  // the bias: n
  rule.operand_dims[0] = unpermute(rule.operand_dims[0], layout->perm_a);
  rule.operand_dims[1] = unpermute(rule.operand_dims[1], layout->perm_b);
  // Result dim j is the product's dim perm_result[j].
  std::vector<int> result(layout->perm_result.size());
  for (size_t j = 0; j < result.size(); ++j) result[j] = rule.result_dims[0][static_cast<size_t>(layout->perm_result[j])];
  rule.result_dims[0] = std::move(result);
  return rule;
}

// ---- Reference computations (double precision, naive loops) ----

// op(x)[i][j] of the matrix at `offset` of a row-major tensor whose last two dims are rows × cols.
double matrixAt(const std::vector<double>& x, int64_t offset, int64_t cols, bool transposed, int64_t i, int64_t j) {
  return transposed ? x[offset + j * cols + i] : x[offset + i * cols + j];
}

Expected<std::vector<TensorData>> matmulReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> a = referenceValues(*operands[0]), b = referenceValues(*operands[1]);
  const Shape& a_shape = ctx.operands[0].shape;
  const Shape& b_shape = ctx.operands[1].shape;
  const Shape& result = ctx.results[0].shape;
  const bool ta = ctx.getInt("transpose_a") == 1, tb = ctx.getInt("transpose_b") == 1;
  const int64_t m = result[result.size() - 2], n = result.back();
  const int64_t k = ta ? a_shape[a_shape.size() - 2] : a_shape.back();
  const Shape batch = batchDims(result), a_batch = batchDims(a_shape), b_batch = batchDims(b_shape);
  std::vector<double> y(static_cast<size_t>(ctx.results[0].numel()));
  for (int64_t e = 0; e < static_cast<int64_t>(y.size()); ++e) {
    const int64_t i = e / n % m, j = e % n, batch_flat = e / (m * n);
    const std::vector<int64_t> batch_index = unravelIndex(batch_flat, batch);
    const int64_t a_offset = broadcastOffsetOf(batch_index, a_batch) * m * k;
    const int64_t b_offset = broadcastOffsetOf(batch_index, b_batch) * k * n;
    double sum = 0;
    for (int64_t p = 0; p < k; ++p)
      sum += matrixAt(a, a_offset, a_shape.back(), ta, i, p) * matrixAt(b, b_offset, b_shape.back(), tb, p, j);
    y[e] = sum;
  }
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

// transpose(x, perm) of a tensor, by the transpose op's reference.
Expected<TensorData> permutedTensor(const TensorData& x, const std::vector<int64_t>& perm) {
  const TensorType type = permuted(x.type, perm);
  const AttrMap attrs{{"perm", perm}};
  const OpDef& transpose = opDef(OpId::transpose);
  const TensorData* const operands[] = {&x};
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> results,
                          transpose.reference(OpContext{transpose, {&x.type, 1}, {&type, 1}, attrs},
                                              std::span<const TensorData* const>(operands)));
  return std::move(results[0]);
}

// transpose(matmul(transpose(a, perm_a), transpose(b, perm_b)) + bias, perm_result), as it says.
Expected<std::vector<TensorData>> fusedMatmulReference(const OpContext& ctx,
                                                       std::span<const TensorData* const> operands) {
  auto layout = fusedMatmulLayout(ctx);
  if (!layout) return referenceError(ctx, layout.status().message());
  CLEAVE_ASSIGN_OR_RETURN(TensorData a, permutedTensor(*operands[0], layout->perm_a));
  CLEAVE_ASSIGN_OR_RETURN(TensorData b, permutedTensor(*operands[1], layout->perm_b));
  const TensorData* inner_operands[] = {&a, &b};
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> product,
                          matmulReference(innerMatmul(ctx, *layout, std::span<const TensorType>(&layout->product, 1)),
                                          inner_operands));
  if (operands.size() == 3) {
    std::vector<double> values = referenceValues(product[0]);
    const std::vector<double> bias = referenceValues(*operands[2]);
    for (size_t i = 0; i < values.size(); ++i) values[i] += bias[i % bias.size()];
    product[0] = referenceTensor(layout->product, values);
  }
  CLEAVE_ASSIGN_OR_RETURN(TensorData result, permutedTensor(product[0], layout->perm_result));
  return std::vector<TensorData>{std::move(result)};
}

Expected<std::vector<TensorData>> gemmReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> a = referenceValues(*operands[0]), b = referenceValues(*operands[1]);
  const bool ta = ctx.getInt("transpose_a") == 1, tb = ctx.getInt("transpose_b") == 1;
  const double alpha = ctx.getFloat("alpha"), beta = ctx.getFloat("beta");
  const int64_t m = ctx.results[0].shape[0], n = ctx.results[0].shape[1];
  const int64_t k = ta ? ctx.operands[0].shape[0] : ctx.operands[0].shape[1];
  const bool with_c = operands.size() == 3;
  const std::vector<double> c = with_c ? referenceValues(*operands[2]) : std::vector<double>{};
  std::vector<double> y;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += matrixAt(a, 0, ctx.operands[0].shape[1], ta, i, p) * matrixAt(b, 0, ctx.operands[1].shape[1], tb, p, j);
      y.push_back(alpha * sum + (with_c ? beta * c[broadcastOffsetOf({i, j}, ctx.operands[2].shape)] : 0));
    }
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

// One operand's gradient of y = op(a)·op(b), as a product lhs·rhs with transpose flags.
struct GradientProduct {
  ValueId lhs, rhs;
  bool transpose_lhs, transpose_rhs;
};

// The products giving da and db from dy (op(x) is x or xᵀ per the forward transpose flags).
std::pair<GradientProduct, GradientProduct> productGradients(ValueId a, ValueId b, ValueId dy, bool transpose_a,
                                                             bool transpose_b) {
  if (!transpose_a && !transpose_b) return {{dy, b, false, true}, {a, dy, true, false}};    // a·b
  if (!transpose_a && transpose_b) return {{dy, b, false, false}, {dy, a, true, false}};    // a·bᵀ
  if (transpose_a && !transpose_b) return {{b, dy, false, true}, {a, dy, false, false}};    // aᵀ·b
  return {{b, dy, true, true}, {dy, a, true, true}};                                        // aᵀ·bᵀ
}

// A matmul or gemm computing `p`, with `extra` attributes (gemm's alpha).
ValueId emitProduct(GradientContext& g, OpId op, const GradientProduct& p, AttrMap extra = {}) {
  if (p.transpose_lhs) extra.emplace("transpose_a", int64_t{1});
  if (p.transpose_rhs) extra.emplace("transpose_b", int64_t{1});
  return g.emit(op, {p.lhs, p.rhs}, std::move(extra));
}

Status matmulGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  ValueId a = g.operand(0), b = g.operand(1);
  auto [da, db] = productGradients(a, b, dy(g), attrs.getInt("transpose_a") == 1, attrs.getInt("transpose_b") == 1);
  // Batch dims broadcast: each product has the result's batch dims, summed back to the operand's.
  g.operand_grads[0] = g.reduceToShape(emitProduct(g, OpId::matmul, da), shapeOf(g, a));
  const Shape& a_shape = shapeOf(g, a);
  if (shapeOf(g, b).size() == 2 && a_shape.size() > 2 && attrs.getInt("transpose_a") == 0) {
    // A weight shared by every batch row (activations [..., m, k] times [k, n]): fold the batch
    // dims into m, so the weight gradient is one 2-D product instead of a batch of products summed.
    int64_t k = a_shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < a_shape.size(); ++d) rows *= a_shape[d];
    ValueId a2 = reshapeTo(g, a, {rows, k});
    ValueId dy2 = reshapeTo(g, dy(g), {rows, shapeOf(g, dy(g)).back()});
    auto [unused, db2] = productGradients(a2, b, dy2, false, attrs.getInt("transpose_b") == 1);
    g.operand_grads[1] = emitProduct(g, OpId::matmul, db2);
    return g.status;
  }
  g.operand_grads[1] = g.reduceToShape(emitProduct(g, OpId::matmul, db), shapeOf(g, b));
  return g.status;
}

Status gemmGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  double alpha = attrs.getFloat("alpha"), beta = attrs.getFloat("beta");
  auto [da, db] = productGradients(g.operand(0), g.operand(1), dy(g), attrs.getInt("transpose_a") == 1,
                                   attrs.getInt("transpose_b") == 1);
  AttrMap scale;
  if (alpha != 1.0) scale.emplace("alpha", alpha);
  g.operand_grads[0] = emitProduct(g, OpId::gemm, da, scale);
  g.operand_grads[1] = emitProduct(g, OpId::gemm, db, scale);
  if (g.node.operands.size() == 3) {
    ValueId dc = beta == 1.0 ? dy(g) : g.emit(OpId::mul, {dy(g), g.scalar(beta, dtypeOf(g, dy(g)))});
    g.operand_grads[2] = g.reduceToShape(dc, shapeOf(g, g.operand(2)));
  }
  return g.status;
}

}  // namespace

Expected<FusedMatmulLayout> fusedMatmulLayout(const OpContext& ctx) {
  FusedMatmulLayout layout;
  CLEAVE_ASSIGN_OR_RETURN(layout.perm_a, foldedPerm(ctx, "perm_a", ctx.operands[0].rank(), "operand 0"));
  CLEAVE_ASSIGN_OR_RETURN(layout.perm_b, foldedPerm(ctx, "perm_b", ctx.operands[1].rank(), "operand 1"));
  layout.operands = {permuted(ctx.operands[0], layout.perm_a), permuted(ctx.operands[1], layout.perm_b)};
  auto product = matmulShape(innerMatmul(ctx, layout, {}));
  if (!product)
    return Status::error(product.status().kind(), product.status().message() + " (the operands as perm_a and perm_b permute them)");
  layout.product = (*product)[0];
  CLEAVE_ASSIGN_OR_RETURN(layout.perm_result, foldedPerm(ctx, "perm_result", layout.product.rank(), "the product"));
  if (ctx.operands.size() == 3) {  // the bias: one value per column of the product
    CLEAVE_TRY(requireSameDType(ctx, 2, 0));
    if (ctx.operands[2].shape != Shape{layout.product.shape.back()})
      return operandShapeError(ctx, 2, "which must be [n] = [" + std::to_string(layout.product.shape.back()) +
                                           "], one value per column of the product");
  }
  return layout;
}

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
                        .sharding = matrixProductRule,
                        .weight_operand = 1});
  table.push_back(OpDef{.id = OpId::fused_matmul,
                        .name = "fused_matmul",
                        .summary = "matmul of transpose(a, perm_a) and transpose(b, perm_b), plus an optional bias "
                                   "row, written transposed by perm_result: the fusion pass's fold of attention's "
                                   "head transposes and of bias adds",
                        .min_operands = 2,
                        .max_operands = 3,
                        .attrs = {optionalInt("transpose_a", 0), optionalInt("transpose_b", 0), optionalInts("perm_a", {}),
                                  optionalInts("perm_b", {}), optionalInts("perm_result", {})},
                        .shape = checkedShapeRule<fusedMatmulShape>,
                        .cost = fusedMatmulCost,
                        .sharding = fusedMatmulRule});
  appendedDef(table, OpId::matmul).reference = matmulReference;
  appendedDef(table, OpId::fused_matmul).reference = fusedMatmulReference;
  appendedDef(table, OpId::fused_matmul).reference_supports = referenceDTypes;
  appendedDef(table, OpId::gemm).reference = gemmReference;
  appendedDef(table, OpId::matmul).reference_supports = referenceDTypes;
  appendedDef(table, OpId::gemm).reference_supports = referenceDTypes;

  // Gradient rules.
  appendedDef(table, OpId::matmul).gradient = matmulGradient;
  appendedDef(table, OpId::gemm).gradient = gemmGradient;
}

}  // namespace cleave::ops
