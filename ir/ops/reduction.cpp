// Reductions, scans and normalisations: reduce_sum/mean/max, argmax, cumsum, softmax, log_softmax, layer_norm,
// rms_norm, batch_norm.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"

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

// argmax: a numeric operand, an axis in range (not empty); the result is i64, the axis kept as 1 or removed.
Expected<std::vector<TensorType>> argmaxShape(const OpContext& ctx) {
  CLEAVE_TRY(requireNumeric(ctx, 0));
  CLEAVE_TRY(requireFlag(ctx, "keepdims"));
  CLEAVE_TRY(requireFlag(ctx, "select_last_index"));
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  Shape out = ctx.operands[0].shape;
  if (out[axis] == 0) return operandShapeError(ctx, 0, "its dim " + std::to_string(axis) + " is empty, which has no max");
  if (ctx.getInt("keepdims") == 1) out[axis] = 1;
  else out.erase(out.begin() + axis);
  return std::vector<TensorType>{{DType::kI64, out}};
}

// cumsum: a numeric operand and an axis in range; exclusive and reverse are flags.
Expected<std::vector<TensorType>> cumsumShape(const OpContext& ctx) {
  CLEAVE_TRY(requireNumeric(ctx, 0));
  CLEAVE_TRY(requireFlag(ctx, "exclusive"));
  CLEAVE_TRY(requireFlag(ctx, "reverse"));
  CLEAVE_TRY(resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0).status());
  return std::vector<TensorType>{ctx.operands[0]};
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

// layer_norm (and rms_norm, without bias): x float; scale and the optional bias have x's dtype and
// shape x.shape[axis:].
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
    case OpId::rms_norm: return 5;
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

// argmax and cumsum need every element along the axis: need_replication; other dims pass through
// (argmax's removed axis maps to no result dim).
ShardingRule alongAxisRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const int axis = static_cast<int>(normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank()));
  const bool removed = ctx.def.id == OpId::argmax && ctx.getInt("keepdims") == 0;
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < static_cast<int>(ctx.operands[0].rank()); ++d) {
    if (d == axis) {
      rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
      if (!removed) rule.addResultFactor(0, d, FactorKind::kNeedReplication);
    } else {
      rule.addFactor({d}, {removed && d > axis ? d - 1 : d});
    }
  }
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
// the normalised factors (layer_norm and rms_norm).
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

// y = x / sqrt(mean(x²) + epsilon) · scale over dims axis.. (torch.nn.RMSNorm, Llama's and Qwen2's norm).
Expected<std::vector<TensorData>> rmsNormReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> x = referenceValues(*operands[0]), scale = referenceValues(*operands[1]);
  const double epsilon = ctx.getFloat("epsilon");
  const int64_t cols = static_cast<int64_t>(scale.size()), rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += x[r * cols + c] * x[r * cols + c];
    const double rstd = 1 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
    for (int64_t c = 0; c < cols; ++c) y.push_back(x[r * cols + c] * rstd * scale[c]);
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

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

// Axes reduce_* reduces, resolved against `rank` and sorted (all of them when the attribute is empty).
std::vector<int64_t> reducedAxes(const GradientContext& g, int64_t rank) {
  std::vector<int64_t> axes;
  for (int64_t a : forwardAttrs(g).getInts("axes")) axes.push_back(normalizeAxis(a, rank));
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  std::sort(axes.begin(), axes.end());
  return axes;
}

// x's shape with the reduced dims set to 1: the shape of a keepdims reduction.
Shape keptShape(const Shape& x, const std::vector<int64_t>& axes) {
  Shape kept = x;
  for (int64_t a : axes) kept[a] = 1;
  return kept;
}

// dy of a reduction over `axes` of x, expanded back to x's shape. dy has the keepdims shape, or
// lacks the reduced dims; then it is first reshaped to the keepdims shape, unless only leading dims
// were reduced (expand aligns shapes from the right, so those need no reshape).
ValueId expandBack(GradientContext& g, ValueId dy, const Shape& x, const std::vector<int64_t>& axes) {
  bool leading_only = true;
  for (size_t i = 0; i < axes.size(); ++i) leading_only = leading_only && axes[i] == static_cast<int64_t>(i);
  ValueId aligned = leading_only ? dy : reshapeTo(g, dy, keptShape(x, axes));
  return g.emit(OpId::expand, {aligned}, {{"shape", x}});
}

// dy expanded back over the reduced dims.
Status reduceSumGradient(GradientContext& g) {
  const Shape x = shapeOf(g, g.operand(0));
  g.operand_grads[0] = expandBack(g, dy(g), x, reducedAxes(g, static_cast<int64_t>(x.size())));
  return g.status;
}

// As reduce_sum, scaled by 1 / (number of elements averaged).
Status reduceMeanGradient(GradientContext& g) {
  const Shape x = shapeOf(g, g.operand(0));
  std::vector<int64_t> axes = reducedAxes(g, static_cast<int64_t>(x.size()));
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(x[a]);
  ValueId scaled = g.emit(OpId::mul, {dy(g), g.scalar(1.0 / count, dtypeOf(g, dy(g)))});
  g.operand_grads[0] = expandBack(g, scaled, x, axes);
  return g.status;
}

// The gradient goes to the elements equal to the max; ties share it evenly (as PyTorch's amax):
// dx = mask · dy / count, mask = (x == max), count = Σ mask over the reduced dims.
Status reduceMaxGradient(GradientContext& g) {
  ValueId x = g.operand(0);
  const Shape x_shape = shapeOf(g, x);
  std::vector<int64_t> axes = reducedAxes(g, static_cast<int64_t>(x_shape.size()));
  Shape kept = keptShape(x_shape, axes);
  ValueId max_kept = reshapeTo(g, g.result(0), kept);
  ValueId mask = g.emit(OpId::cast, {g.emit(OpId::equal, {x, max_kept})},
                        {{"to", std::string(dtypeName(dtypeOf(g, x)))}});
  ValueId count = mask;
  if (!axes.empty()) count = g.emit(OpId::reduce_sum, {mask}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  ValueId share = g.emit(OpId::div, {reshapeTo(g, dy(g), kept), count});
  g.operand_grads[0] = g.emit(OpId::mul, {mask, share});
  return g.status;
}

Status softmaxGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::softmax_grad, {dy(g), g.result(0)}, copyAttrs(g, {"axis"}));
  return g.status;
}

Status logSoftmaxGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::log_softmax_grad, {dy(g), g.result(0)}, copyAttrs(g, {"axis"}));
  return g.status;
}

Status rmsNormGradient(GradientContext& g) {
  std::vector<ValueId> grads =
      g.emitAll(OpId::rms_norm_grad, {dy(g), g.operand(0), g.operand(1)}, copyAttrs(g, {"axis", "epsilon"}));
  if (grads.size() != 2) return g.status;
  g.operand_grads[0] = grads[0];
  g.operand_grads[1] = grads[1];
  return g.status;
}

Status layerNormGradient(GradientContext& g) {
  std::vector<ValueId> grads =
      g.emitAll(OpId::layer_norm_grad, {dy(g), g.operand(0), g.operand(1)}, copyAttrs(g, {"axis", "epsilon"}));
  if (grads.size() != 3) return g.status;
  g.operand_grads[0] = grads[0];
  g.operand_grads[1] = grads[1];
  if (g.node.operands.size() == 3) g.operand_grads[2] = grads[2];
  return g.status;
}

// Inference batch norm, y = (x − mean) · scale / √(var + eps) + bias, with mean and var constants
// (the running statistics; training through it is PyTorch's eval-mode batch norm): gradients go
// to x, scale and bias only.
Status batchNormGradient(GradientContext& g) {
  ValueId x = g.operand(0), scale = g.operand(1), mean = g.operand(3), var = g.operand(4);
  const Shape x_shape = shapeOf(g, x);
  DType dtype = dtypeOf(g, x);
  // Per-channel [C] values broadcast against x [N,C,...] as [C,1,...,1].
  Shape channel_shape(x_shape.size() - 1, 1);
  channel_shape[0] = x_shape[1];
  std::vector<int64_t> non_channel_axes = {0};
  for (int64_t d = 2; d < static_cast<int64_t>(x_shape.size()); ++d) non_channel_axes.push_back(d);
  AttrMap sum_to_channels = {{"axes", non_channel_axes}, {"keepdims", int64_t{0}}};

  double epsilon = forwardAttrs(g).getFloat("epsilon");
  ValueId inv_std =
      g.emit(OpId::div, {g.scalar(1.0, dtype), g.emit(OpId::sqrt, {g.emit(OpId::add, {var, g.scalar(epsilon, dtype)})})});
  ValueId x_scale = reshapeTo(g, g.emit(OpId::mul, {scale, inv_std}), channel_shape);
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), x_scale});
  ValueId x_hat = g.emit(OpId::mul, {g.emit(OpId::sub, {x, reshapeTo(g, mean, channel_shape)}),
                                     reshapeTo(g, inv_std, channel_shape)});
  g.operand_grads[1] = g.emit(OpId::reduce_sum, {g.emit(OpId::mul, {dy(g), x_hat})}, sum_to_channels);
  g.operand_grads[2] = g.emit(OpId::reduce_sum, {dy(g)}, sum_to_channels);
  return g.status;
}

// cumsum's gradient is cumsum of dy the other way along the axis (exclusive stays exclusive).
Status cumsumGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  g.operand_grads[0] = g.emit(OpId::cumsum, {dy(g)},
                              {{"axis", attrs.getInt("axis")}, {"exclusive", attrs.getInt("exclusive")},
                               {"reverse", int64_t{1} - attrs.getInt("reverse")}});
  return g.status;
}

// ---- Reference evaluation (see ir/ops/reference_support.h) ----

// argmax: the index of the largest element along axis (a NaN is the largest, as in PyTorch and
// numpy); ties go to the first, or the last with select_last_index.
Expected<std::vector<TensorData>> argmaxReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const AxisSplit s = splitAroundAxis(x.type.shape, normalizeAxis(ctx.getInt("axis"), x.type.rank()));
  const bool last = ctx.getInt("select_last_index") == 1;
  const std::vector<double> values = referenceValues(x);
  std::vector<int64_t> out(static_cast<size_t>(s.outer * s.inner));
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 0; k < s.inner; ++k) {
      int64_t best = 0;
      double best_value = values[static_cast<size_t>(o * s.length * s.inner + k)];
      for (int64_t j = 1; j < s.length && !std::isnan(best_value); ++j) {
        const double v = values[static_cast<size_t>((o * s.length + j) * s.inner + k)];
        if (std::isnan(v) || v > best_value || (last && v == best_value)) {
          best = j;
          best_value = v;
        }
      }
      out[static_cast<size_t>(o * s.inner + k)] = best;
    }
  return single(makeTensor(ctx.results[0], out));
}

// cumsum: running sums along axis (exclusive: of the elements before; reverse: from the end);
// floats accumulate in double, integers wrap in their own type.
Expected<std::vector<TensorData>> cumsumReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const AxisSplit s = splitAroundAxis(x.type.shape, normalizeAxis(ctx.getInt("axis"), x.type.rank()));
  const bool exclusive = ctx.getInt("exclusive") == 1, reverse = ctx.getInt("reverse") == 1;
  return single(visitDType(x.type.dtype, [&]<class T>(T) -> Expected<TensorData> {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const std::vector<T> in = readElements<T>(x);
    std::vector<T> out(in.size());
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t k = 0; k < s.inner; ++k) {
        Acc sum{0};
        for (int64_t step = 0; step < s.length; ++step) {
          const int64_t j = reverse ? s.length - 1 - step : step;
          const size_t at = static_cast<size_t>((o * s.length + j) * s.inner + k);
          if (exclusive) {
            out[at] = static_cast<T>(sum);
            sum = addElements(sum, static_cast<Acc>(in[at]));
          } else {
            sum = addElements(sum, static_cast<Acc>(in[at]));
            out[at] = static_cast<T>(sum);
          }
        }
      }
    return makeTensor(ctx.results[0], out);
  }));
}

// reduce_sum, reduce_mean and reduce_max over `axes` (empty: all); floats accumulate in double,
// integers wrap in their own type. keepdims does not change the row-major order of the results,
// so the result type's shape is used as given.
Expected<std::vector<TensorData>> reduceReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const OpId op = ctx.def.id;
  const TensorData& x = *operands[0];
  const TensorType& result = ctx.results[0];
  const Shape& shape = x.type.shape;
  // 1. Which dims are reduced.
  std::vector<bool> reduced(shape.size(), ctx.getInts("axes").empty());
  for (int64_t axis : ctx.getInts("axes")) {
    int64_t d = normalizeAxis(axis, x.type.rank());
    if (d < 0)
      return referenceError(ctx, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(x.type.rank()));
    reduced[d] = true;
  }
  // 2. For each input element, the result element it contributes to: reduced dims get stride 0.
  Shape kept_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) kept_shape[d] = 1;
  std::vector<int64_t> strides = rowMajorStrides(kept_shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) strides[d] = 0;
  const std::vector<int64_t> target = stridedIndices(shape, strides);
  const int64_t out_count = numelOf(kept_shape);
  const int64_t group_size = out_count == 0 ? 0 : x.type.numel() / out_count;
  if (op == OpId::reduce_max && group_size == 0 && out_count > 0)
    return referenceError(ctx, "the maximum of an empty set is undefined");
  // 3. Accumulate.
  return single(visitDType(x.type.dtype, [&]<class T>(T) -> Expected<TensorData> {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const std::vector<T> in = readElements<T>(x);
    std::vector<Acc> acc(static_cast<size_t>(out_count), Acc{0});
    std::vector<bool> seen(acc.size(), false);
    for (size_t i = 0; i < in.size(); ++i) {
      Acc& slot = acc[target[i]];
      if (op != OpId::reduce_max) slot = addElements(slot, static_cast<Acc>(in[i]));
      else if (!seen[target[i]] || in[i] > slot || std::isnan(static_cast<double>(in[i]))) slot = in[i];
      seen[target[i]] = true;
    }
    std::vector<T> out(acc.size());
    for (size_t i = 0; i < acc.size(); ++i)
      out[i] = static_cast<T>(op == OpId::reduce_mean ? acc[i] / static_cast<Acc>(group_size) : acc[i]);
    return makeTensor(result, out);
  }));
}

// Sets the references constant folding uses.
void addReductionReferences(std::vector<OpDef>& table) {
  setFoldingReference(table, OpId::reduce_sum, reduceReference, referenceNumeric);
  setFoldingReference(table, OpId::reduce_mean, reduceReference, referenceFloat);
  setFoldingReference(table, OpId::reduce_max, reduceReference, referenceNumeric);
  setFoldingReference(table, OpId::argmax, argmaxReference, referenceNumeric);
  setFoldingReference(table, OpId::cumsum, cumsumReference, referenceNumeric);
}

}  // namespace

void addReductionOps(std::vector<OpDef>& table) {
  table.push_back(reduceOp(OpId::reduce_sum, "reduce_sum", "sum over axes (all when empty)"));
  table.push_back(reduceOp(OpId::reduce_mean, "reduce_mean", "mean over axes (all when empty)"));
  table.push_back(reduceOp(OpId::reduce_max, "reduce_max", "max over axes (all when empty)"));
  table.push_back(OpDef{.id = OpId::argmax,
                        .name = "argmax",
                        .summary = "i64 index of the largest element along axis (NaN largest; first or last tie)",
                        .attrs = {optionalInt("axis", 0), optionalInt("keepdims", 1), optionalInt("select_last_index", 0)},
                        .shape = checkedShapeRule<argmaxShape>,
                        .cost = normalizationCost,
                        .sharding = alongAxisRule});
  table.push_back(OpDef{.id = OpId::cumsum,
                        .name = "cumsum",
                        .summary = "running sums along axis (exclusive: before each element; reverse: from the end)",
                        .attrs = {optionalInt("axis", 0), optionalInt("exclusive", 0), optionalInt("reverse", 0)},
                        .shape = checkedShapeRule<cumsumShape>,
                        .cost = normalizationCost,
                        .sharding = alongAxisRule});
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
  table.push_back(OpDef{.id = OpId::rms_norm,
                        .name = "rms_norm",
                        .summary = "x / sqrt(mean(x^2) + epsilon) over dims axis.., times scale (RMSNorm)",
                        .min_operands = 2,
                        .max_operands = 2,
                        .attrs = {optionalInt("axis", -1), optionalFloat("epsilon", 1e-6)},
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
  appendedDef(table, OpId::reduce_mean).partial_reduction = PartialReduction::kMean;
  // A partial max has no gradient rule: reduced dims stay whole.
  appendedDef(table, OpId::reduce_max).partial_reduction = PartialReduction::kNone;
  appendedDef(table, OpId::cumsum).gradient = cumsumGradient;
  appendedDef(table, OpId::softmax).reference = softmaxReference<false>;
  appendedDef(table, OpId::softmax).fusable_along_last_axis = true;
  appendedDef(table, OpId::layer_norm).fusable_along_last_axis = true;
  appendedDef(table, OpId::rms_norm).fusable_along_last_axis = true;
  appendedDef(table, OpId::log_softmax).reference = softmaxReference<true>;
  appendedDef(table, OpId::layer_norm).reference = layerNormReference;
  appendedDef(table, OpId::rms_norm).reference = rmsNormReference;
  appendedDef(table, OpId::batch_norm).reference = batchNormReference;
  for (OpId id : {OpId::softmax, OpId::log_softmax, OpId::layer_norm, OpId::rms_norm, OpId::batch_norm})
    appendedDef(table, id).reference_supports = referenceDTypes;

  // Gradient rules.
  appendedDef(table, OpId::reduce_sum).gradient = reduceSumGradient;
  appendedDef(table, OpId::reduce_mean).gradient = reduceMeanGradient;
  appendedDef(table, OpId::reduce_max).gradient = reduceMaxGradient;
  appendedDef(table, OpId::softmax).gradient = softmaxGradient;
  appendedDef(table, OpId::log_softmax).gradient = logSoftmaxGradient;
  appendedDef(table, OpId::layer_norm).gradient = layerNormGradient;
  appendedDef(table, OpId::rms_norm).gradient = rmsNormGradient;
  appendedDef(table, OpId::batch_norm).gradient = batchNormGradient;

  addReductionReferences(table);
}

}  // namespace cleave::ops
