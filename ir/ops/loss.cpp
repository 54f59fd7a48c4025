// Loss ops: softmax_cross_entropy and mse, each a scalar f32 mean as PyTorch computes it.
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

// softmax_cross_entropy: logits [..., C] (float, C >= 1), labels [...] (i64 or i32) with logits' leading dims.
Expected<std::vector<TensorType>> softmaxCrossEntropyShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(requireIndexType(ctx, 1));
  const Shape& logits = ctx.operands[0].shape;
  if (logits.back() < 1) return operandShapeError(ctx, 0, "its class dim -1 must be at least 1");
  CLEAVE_TRY(requireShape(ctx, 1, Shape(logits.begin(), logits.end() - 1), "operand 0's dims before the class dim"));
  return std::vector<TensorType>{{DType::kF32, {}}};
}

// mse: prediction and target of one float dtype and one shape.
Expected<std::vector<TensorType>> mseShape(const OpContext& ctx) {
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(requireSameDType(ctx, 1, 0));
  CLEAVE_TRY(requireShape(ctx, 1, ctx.operands[0].shape, "operand 0's shape"));
  return std::vector<TensorType>{{DType::kF32, {}}};
}

// softmax_cross_entropy: a log_softmax (5 per logit) plus a pick and an add per label position.
OpCost softmaxCrossEntropyCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  double flops = 5 * static_cast<double>(ctx.operands[0].numel()) + 2 * static_cast<double>(ctx.operands[1].numel());
  return {flops, operandAndResultBytes(ctx, results)};
}

// mse: subtract, square, add per element.
OpCost mseCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {3 * static_cast<double>(ctx.operands[0].numel()), operandAndResultBytes(ctx, results)};
}

// The leading (position) dims are reduction factors shared by logits and labels: the mean over
// positions is a sum, so split positions give partial sums (each shard divides by the global count of
// non-ignored labels, so the combine is a plain sum). The class dim needs a whole row: need_replication.
ShardingRule softmaxCrossEntropyShardingRule(const OpContext& ctx) {
  ShardingRule rule;
  if (inferredResults(ctx).empty()) return rule;
  const Shape& logits = ctx.operands[0].shape;
  std::vector<int> positions;
  for (size_t i = 0; i + 1 < logits.size(); ++i) positions.push_back(rule.addFactor(logits[i], FactorKind::kReduction));
  std::vector<int> logits_dims = positions;
  logits_dims.push_back(rule.addFactor(logits.back(), FactorKind::kNeedReplication));
  rule.operand_dims = {logits_dims, positions};
  rule.result_dims = {{}};
  return rule;
}

// mse: every dim is a reduction factor shared by prediction and target.
ShardingRule mseShardingRule(const OpContext& ctx) {
  ShardingRule rule;
  if (inferredResults(ctx).empty()) return rule;
  std::vector<int> dims;
  for (int64_t d : ctx.operands[0].shape) dims.push_back(rule.addFactor(d, FactorKind::kReduction));
  rule.operand_dims = {dims, dims};
  rule.result_dims = {{}};
  return rule;
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

Status softmaxCrossEntropyGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::softmax_cross_entropy_grad, {dy(g), g.operand(0), g.operand(1)},
                              copyAttrs(g, {"ignore_index"}));
  return g.status;
}

// loss = mean((p − t)²): dp = 2 · (p − t) / N · dloss, dt = −dp.
Status mseGradient(GradientContext& g) {
  ValueId prediction = g.operand(0), target = g.operand(1);
  DType dtype = dtypeOf(g, prediction);
  ValueId dloss = dy(g);
  if (dtypeOf(g, dloss) != dtype) dloss = g.emit(OpId::cast, {dloss}, {{"to", std::string(dtypeName(dtype))}});
  double count = static_cast<double>(g.typeOf(prediction).numel());
  ValueId scale = g.emit(OpId::mul, {dloss, g.scalar(2.0 / count, dtype)});
  ValueId dprediction = g.emit(OpId::mul, {g.emit(OpId::sub, {prediction, target}), scale});
  g.operand_grads[0] = dprediction;
  g.operand_grads[1] = g.emit(OpId::neg, {dprediction});
  return g.status;
}

}  // namespace

void addLossOps(std::vector<OpDef>& table) {
  table.push_back(OpDef{.id = OpId::softmax_cross_entropy,
                        .name = "softmax_cross_entropy",
                        .summary = "mean over label positions of -log_softmax(logits)[label], skipping ignore_index",
                        .min_operands = 2,
                        .max_operands = 2,
                        .attrs = {optionalInt("ignore_index", -100)},
                        .shape = checkedShapeRule<softmaxCrossEntropyShape>,
                        .cost = softmaxCrossEntropyCost,
                        .sharding = softmaxCrossEntropyShardingRule});
  table.push_back(OpDef{.id = OpId::mse,
                        .name = "mse",
                        .summary = "mean of (prediction - target)^2",
                        .min_operands = 2,
                        .max_operands = 2,
                        .attrs = {},
                        .shape = checkedShapeRule<mseShape>,
                        .cost = mseCost,
                        .sharding = mseShardingRule});
  // Both are means over the batch: a batch split leaves each device a partial mean.
  appendedDef(table, OpId::softmax_cross_entropy).averages_over_reduction = true;
  appendedDef(table, OpId::mse).averages_over_reduction = true;

  // Gradient rules.
  appendedDef(table, OpId::softmax_cross_entropy).gradient = softmaxCrossEntropyGradient;
  appendedDef(table, OpId::mse).gradient = mseGradient;
}

}  // namespace cleave::ops
