// Loss ops: softmax_cross_entropy and mse, each a scalar f32 mean as PyTorch computes it, and
// softmax_cross_entropy_and_grad, the loss and its gradient in one pass (made by the fusion pass).
#include <algorithm>
#include <cmath>

#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"

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

// softmax_cross_entropy_and_grad: logits, labels, dloss -> (loss, dlogits), each as
// softmax_cross_entropy and softmax_cross_entropy_grad type them.
Expected<std::vector<TensorType>> softmaxCrossEntropyAndGradShape(const OpContext& ctx) {
  const std::vector<TensorType> loss_operands{ctx.operands[0], ctx.operands[1]};
  const std::vector<TensorType> grad_operands{ctx.operands[2], ctx.operands[0], ctx.operands[1]};
  CLEAVE_ASSIGN_OR_RETURN(auto loss, inferResultTypes(opDef(OpId::softmax_cross_entropy), loss_operands, ctx.attrs));
  CLEAVE_ASSIGN_OR_RETURN(auto grad, inferResultTypes(opDef(OpId::softmax_cross_entropy_grad), grad_operands, ctx.attrs));
  return std::vector<TensorType>{loss[0], grad[0]};
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

// softmax_cross_entropy_and_grad: the loss's FLOPs and its gradient's; the logits read once.
OpCost softmaxCrossEntropyAndGradCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const std::vector<TensorType> grad_operands{ctx.operands[2], ctx.operands[0], ctx.operands[1]};
  const OpDef& grad = opDef(OpId::softmax_cross_entropy_grad);
  const double flops = softmaxCrossEntropyCost(OpContext{opDef(OpId::softmax_cross_entropy),
                                                         std::vector<TensorType>{ctx.operands[0], ctx.operands[1]},
                                                         std::vector<TensorType>{results[0]}, ctx.attrs})
                           .flops +
                       grad.cost(OpContext{grad, grad_operands, std::vector<TensorType>{results[1]}, ctx.attrs}).flops;
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
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const int class_dim = static_cast<int>(ctx.operands[0].rank()) - 1;
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < class_dim; ++d) rule.addFactor({d, d}, {}, FactorKind::kReduction);  // positions
  rule.addOperandFactor(0, class_dim, FactorKind::kNeedReplication);
  return rule.build();
}

// mse: every dim is a reduction factor shared by prediction and target.
ShardingRule mseShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwise(ctx.operands[0].shape, [](int) { return FactorKind::kReduction; });
  return rule.build();
}

// softmax_cross_entropy_and_grad: a mean over the rows and whole rows of classes, so no dim of the
// logits splits (it is made after partitioning, on each device's own rows).
ShardingRule softmaxCrossEntropyAndGradShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwise(ctx.operands[0].shape, [](int) { return FactorKind::kNeedReplication; });
  return rule.build();
}

// ---- Reference computations (double precision, naive loops) ----

// The mean over counted label positions of -log_softmax(row)[label]; NaN when none is counted (as
// PyTorch). A label outside [0, classes) other than ignore_index is bad input.
Expected<std::vector<TensorData>> softmaxCrossEntropyReference(const OpContext& ctx,
                                                               std::span<const TensorData* const> operands) {
  const std::vector<double> logits = referenceValues(*operands[0]), labels = referenceValues(*operands[1]);
  const int64_t classes = ctx.operands[0].shape.back(), ignore_index = ctx.getInt("ignore_index");
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < static_cast<int64_t>(labels.size()); ++r) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label == ignore_index) continue;
    if (label < 0 || label >= classes)
      return Status::badInput("softmax_cross_entropy: label " + std::to_string(label) + " at position " +
                              std::to_string(r) + " is out of range [0, " + std::to_string(classes) + ")");
    double max = -INFINITY, exp_sum = 0;
    for (int64_t c = 0; c < classes; ++c) max = std::max(max, logits[r * classes + c]);
    for (int64_t c = 0; c < classes; ++c) exp_sum += std::exp(logits[r * classes + c] - max);
    sum += std::log(exp_sum) + max - logits[r * classes + label];
    ++count;
  }
  return std::vector<TensorData>{referenceTensor(ctx.results[0], {count > 0 ? sum / static_cast<double>(count) : NAN})};
}

Expected<std::vector<TensorData>> mseReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> p = referenceValues(*operands[0]), t = referenceValues(*operands[1]);
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += (p[i] - t[i]) * (p[i] - t[i]);
  return std::vector<TensorData>{referenceTensor(ctx.results[0], {sum / static_cast<double>(p.size())})};
}

// The references of softmax_cross_entropy and softmax_cross_entropy_grad, one after the other.
Expected<std::vector<TensorData>> softmaxCrossEntropyAndGradReference(const OpContext& ctx,
                                                                      std::span<const TensorData* const> operands) {
  const std::vector<TensorType> loss_operands{ctx.operands[0], ctx.operands[1]};
  const std::vector<TensorType> grad_operands{ctx.operands[2], ctx.operands[0], ctx.operands[1]};
  const std::vector<TensorType> loss_result{ctx.results[0]}, grad_result{ctx.results[1]};
  const OpDef& loss_def = opDef(OpId::softmax_cross_entropy);
  const OpDef& grad_def = opDef(OpId::softmax_cross_entropy_grad);
  const std::vector<const TensorData*> loss_args{operands[0], operands[1]};
  const std::vector<const TensorData*> grad_args{operands[2], operands[0], operands[1]};
  const OpContext loss_ctx{loss_def, loss_operands, loss_result, ctx.attrs};
  const OpContext grad_ctx{grad_def, grad_operands, grad_result, ctx.attrs};
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> loss, loss_def.reference(loss_ctx, loss_args));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> grad, grad_def.reference(grad_ctx, grad_args));
  std::vector<TensorData> results;
  results.push_back(std::move(loss[0]));
  results.push_back(std::move(grad[0]));
  return results;
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
  appendedDef(table, OpId::softmax_cross_entropy).partial_reduction = PartialReduction::kMean;
  appendedDef(table, OpId::mse).partial_reduction = PartialReduction::kMean;
  table.push_back(OpDef{.id = OpId::softmax_cross_entropy_and_grad,
                        .name = "softmax_cross_entropy_and_grad",
                        .summary = "softmax_cross_entropy(logits, labels) and softmax_cross_entropy_grad(dloss, logits, "
                                   "labels) in one pass: (loss, dlogits) (made by the fusion pass)",
                        .min_operands = 3,
                        .max_operands = 3,
                        .attrs = {optionalInt("ignore_index", -100)},
                        .shape = checkedShapeRule<softmaxCrossEntropyAndGradShape>,
                        .cost = softmaxCrossEntropyAndGradCost,
                        .sharding = softmaxCrossEntropyAndGradShardingRule,
                        .reference = softmaxCrossEntropyAndGradReference});
  appendedDef(table, OpId::softmax_cross_entropy).reference = softmaxCrossEntropyReference;
  appendedDef(table, OpId::mse).reference = mseReference;
  appendedDef(table, OpId::softmax_cross_entropy).reference_supports = referenceDTypes;
  appendedDef(table, OpId::mse).reference_supports = referenceDTypes;

  // Gradient rules.
  appendedDef(table, OpId::softmax_cross_entropy).gradient = softmaxCrossEntropyGradient;
  appendedDef(table, OpId::mse).gradient = mseGradient;
}

}  // namespace cleave::ops
