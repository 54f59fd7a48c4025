// Reductions and normalisations: reduce_sum/mean/max, softmax, log_softmax, layer_norm, batch_norm.
#include <algorithm>
#include <cmath>

#include "ir/ops/op_rules.h"
#include "ir/ops/reference_helpers.h"

namespace cleave::ops {
namespace {

// The dims reduce_* reduces: `axes` resolved, or every dim when it is empty.
Expected<std::vector<bool>> reducedDims(const OpContext& ctx) {
  int64_t rank = ctx.operands[0].rank();
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> axes, resolveAxes(ctx, "axes", rank, "operand 0"));
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) reduced[a] = true;
  return reduced;
}

Expected<std::vector<TensorType>> reduceShape(const OpContext& ctx) {
  CLEAVE_TRY(requireNumeric(ctx, 0));
  CLEAVE_TRY(requireFlag(ctx, "keepdims"));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<bool> reduced, reducedDims(ctx));
  const Shape& in = ctx.operands[0].shape;
  bool keepdims = ctx.getInt("keepdims") == 1;
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (reduced[i] && in[i] == 0 && ctx.def.id == OpId::reduce_max)
      return operandShapeError(ctx, 0, "its dim " + std::to_string(i) + " is empty, which has no max");
    if (!reduced[i])
      out.push_back(in[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// softmax and log_softmax: a float operand and an axis in range.
Expected<std::vector<TensorType>> softmaxShape(const OpContext& ctx) {
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0).status());
  return std::vector<TensorType>{ctx.operands[0]};
}

Status checkEpsilon(const OpContext& ctx) {
  double epsilon = ctx.getFloat("epsilon");
  if (epsilon >= 0 && std::isfinite(epsilon)) return Status::ok();
  return attrError(ctx, "epsilon", "is " + std::to_string(epsilon) + ", must be finite and >= 0");
}

// layer_norm: x float; scale and the optional bias have x's dtype and shape x.shape[axis:].
Expected<std::vector<TensorType>> layerNormShape(const OpContext& ctx) {
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(checkEpsilon(ctx));
  const Shape& x = ctx.operands[0].shape;
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  Shape normalized(x.begin() + axis, x.end());
  for (int i = 1; i < static_cast<int>(ctx.operands.size()); ++i) {
    CLEAVE_TRY(requireSameDType(ctx, i, 0));
    CLEAVE_TRY(requireShape(ctx, i, normalized, "operand 0's dims from axis " + std::to_string(axis)));
  }
  return std::vector<TensorType>{ctx.operands[0]};
}

// batch_norm: x [N,C,...] float; scale, bias, mean and var are [C] of x's dtype.
Expected<std::vector<TensorType>> batchNormShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 2));
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(checkEpsilon(ctx));
  Shape channels = {ctx.operands[0].shape[1]};
  for (int i = 1; i < 5; ++i) {
    CLEAVE_TRY(requireSameDType(ctx, i, 0));
    CLEAVE_TRY(requireShape(ctx, i, channels, "operand 0's channel dim 1"));
  }
  return std::vector<TensorType>{ctx.operands[0]};
}

// FLOPs per input element: a reduction does about one; softmax and log_softmax about 5 (max, subtract,
// exp, sum, divide or log); layer_norm about 8 (mean, variance, normalise, scale, shift); inference
// batch_norm 4 (subtract, multiply by the precomputed 1/sqrt(var+eps), scale, shift).
double flopsPerInputElement(OpId id) {
  switch (id) {
    case OpId::softmax:
    case OpId::log_softmax: return 5;
    case OpId::layer_norm: return 8;
    case OpId::batch_norm: return 4;
    default: return 1;
  }
}

OpCost normalizationCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  double numel = static_cast<double>(ctx.operands[0].numel());
  return {flopsPerInputElement(ctx.def.id) * numel, operandAndResultBytes(ctx, results)};
}

// Reduced dims are reduction factors, kept dims pass-through. For reduce_max a split reduced dim gives a
// partial max, combined by an all-reduce with max rather than sum; for reduce_mean each shard's sum is
// scaled by 1/(global count) so that the combine is a plain sum.
ShardingRule reduceShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addReduction(*reducedDims(ctx), ctx.getInt("keepdims") == 1);  // valid: the shape rule accepted it
  return rule.build();
}

// The softmax axis needs every element of a row: need_replication; other dims pass through.
ShardingRule softmaxShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  int64_t axis = normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank());
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwise(ctx.operands[0].shape,
                    [&](int d) { return d == axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough; });
  return rule.build();
}

// Normalised dims (axis..rank-1) need_replication, leading dims pass through; scale and bias map to
// the normalised factors.
ShardingRule layerNormShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  int64_t axis = normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank());
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addBroadcastingPointwise(ctx.operands[0].shape, [&](int d) {
    return d >= axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough;
  });
  return rule.build();
}

// Inference batch_norm is elementwise per channel: every dim passes through; the [C] operands map to C.
ShardingRule batchNormShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  std::vector<int> dims = rule.addPointwise(ctx.operands[0].shape);  // the [C] operands are of lower rank
  for (int i = 1; i < 5; ++i) rule.mapOperand(i, {dims[1]});
  return rule.build();
}

OpDef reduceOp(OpId id, std::string_view name, std::string_view summary) {
  return OpDef{.id = id,
               .name = name,
               .summary = summary,
               .attrs = {optionalInts("axes", {}), optionalInt("keepdims", 1)},
               .shape = checkedShapeRule<reduceShape>,
               .cost = normalizationCost,
               .sharding = reduceShardingRule};
}

// ---- Reference computations (double precision, naive loops) ----

// softmax (or log_softmax) of x along `axis`, with the row maximum subtracted first.
std::vector<double> softmaxAlong(const std::vector<double>& x, const Shape& shape, int64_t axis, bool log) {
  const AxisSplit s = splitAroundAxis(shape, axis);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t l) { return (o * s.length + l) * s.inner + i; };
      double max = -INFINITY, sum = 0;
      for (int64_t l = 0; l < s.length; ++l) max = std::max(max, x[at(l)]);
      for (int64_t l = 0; l < s.length; ++l) sum += std::exp(x[at(l)] - max);
      for (int64_t l = 0; l < s.length; ++l)
        y[at(l)] = log ? x[at(l)] - max - std::log(sum) : std::exp(x[at(l)] - max) / sum;
    }
  return y;
}

template <bool kLog>
Expected<std::vector<TensorData>> softmaxReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank());
  return std::vector<TensorData>{referenceTensor(
      ctx.results[0], softmaxAlong(referenceValues(*operands[0]), ctx.operands[0].shape, axis, kLog))};
}

Expected<std::vector<TensorData>> layerNormReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> x = referenceValues(*operands[0]), scale = referenceValues(*operands[1]);
  const std::vector<double> bias = operands.size() == 3 ? referenceValues(*operands[2]) : std::vector<double>{};
  const double epsilon = ctx.getFloat("epsilon");
  const int64_t cols = static_cast<int64_t>(scale.size()), rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c] / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) var += std::pow(x[r * cols + c] - mean, 2) / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c)
      y.push_back((x[r * cols + c] - mean) / std::sqrt(var + epsilon) * scale[c] + (bias.empty() ? 0 : bias[c]));
  }
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

Expected<std::vector<TensorData>> batchNormReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> x = referenceValues(*operands[0]), scale = referenceValues(*operands[1]);
  const std::vector<double> bias = referenceValues(*operands[2]), mean = referenceValues(*operands[3]);
  const std::vector<double> var = referenceValues(*operands[4]);
  const double epsilon = ctx.getFloat("epsilon");
  const AxisSplit s = splitAroundAxis(ctx.operands[0].shape, 1);
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const int64_t c = i / s.inner % s.length;
    y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + epsilon) * scale[c] + bias[c];
  }
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

}  // namespace

void addReductionOps(std::vector<OpDef>& table) {
  table.push_back(reduceOp(OpId::reduce_sum, "reduce_sum", "sum over axes (all when empty)"));
  table.push_back(reduceOp(OpId::reduce_mean, "reduce_mean", "mean over axes (all when empty)"));
  table.push_back(reduceOp(OpId::reduce_max, "reduce_max", "max over axes (all when empty)"));
  table.push_back(OpDef{.id = OpId::softmax,
                        .name = "softmax",
                        .summary = "exp(x) / sum(exp(x)) along axis",
                        .attrs = {optionalInt("axis", -1)},
                        .shape = checkedShapeRule<softmaxShape>,
                        .cost = normalizationCost,
                        .sharding = softmaxShardingRule});
  table.push_back(OpDef{.id = OpId::log_softmax,
                        .name = "log_softmax",
                        .summary = "x - log(sum(exp(x))) along axis",
                        .attrs = {optionalInt("axis", -1)},
                        .shape = checkedShapeRule<softmaxShape>,
                        .cost = normalizationCost,
                        .sharding = softmaxShardingRule});
  table.push_back(OpDef{.id = OpId::layer_norm,
                        .name = "layer_norm",
                        .summary = "normalises over dims axis.. (biased variance), then scales and shifts",
                        .min_operands = 2,
                        .max_operands = 3,
                        .attrs = {optionalInt("axis", -1), optionalFloat("epsilon", 1e-5)},
                        .shape = checkedShapeRule<layerNormShape>,
                        .cost = normalizationCost,
                        .sharding = layerNormShardingRule});
  table.push_back(OpDef{.id = OpId::batch_norm,
                        .name = "batch_norm",
                        .summary = "inference batch norm with given per-channel mean and var",
                        .min_operands = 5,
                        .max_operands = 5,
                        .attrs = {optionalFloat("epsilon", 1e-5)},
                        .shape = checkedShapeRule<batchNormShape>,
                        .cost = normalizationCost,
                        .sharding = batchNormShardingRule});
  appendedDef(table, OpId::reduce_mean).averages_over_reduction = true;
  appendedDef(table, OpId::softmax).reference = softmaxReference<false>;
  appendedDef(table, OpId::log_softmax).reference = softmaxReference<true>;
  appendedDef(table, OpId::layer_norm).reference = layerNormReference;
  appendedDef(table, OpId::batch_norm).reference = batchNormReference;
  for (OpId id : {OpId::softmax, OpId::log_softmax, OpId::layer_norm, OpId::batch_norm})
    appendedDef(table, id).reference_supports = referenceReadsAllDTypes;
}

}  // namespace cleave::ops
