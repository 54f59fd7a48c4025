// Elementwise ops: binary arithmetic, comparisons, unary math, clip, cast, where, dropout, identity.
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

// FLOPs counted per result element. A transcendental function (and sqrt, pow, and gelu, which is
// built on erf or tanh) counts 8: roughly its instruction count relative to an add on CPUs and GPUs.
constexpr double kTranscendentalFlops = 8;

bool isComparison(OpId id) {
  return id == OpId::equal || id == OpId::less || id == OpId::less_equal || id == OpId::greater ||
         id == OpId::greater_equal;
}

double flopsPerElement(OpId id) {
  switch (id) {
    case OpId::sqrt:
    case OpId::exp:
    case OpId::log:
    case OpId::erf:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::pow: return kTranscendentalFlops;
    case OpId::clip: return 2;     // a max and a min
    case OpId::dropout: return 4;  // a random draw, a compare, a select and a scale
    case OpId::cast:
    case OpId::identity: return 0;
    default: return 1;  // add, sub, mul, div, comparisons, neg, relu, where
  }
}

// add, sub, mul, div, pow and the comparisons: two operands of one dtype, numpy broadcasting.
// Arithmetic and ordering need numbers; equal also accepts bool. Comparisons give bool.
Expected<std::vector<TensorType>> binaryShape(const OpContext& ctx) {
  OpId id = ctx.def.id;
  if (id != OpId::equal) CLEAVE_TRY(requireNumeric(ctx, 0));
  CLEAVE_TRY(requireSameDType(ctx, 1, 0));
  CLEAVE_ASSIGN_OR_RETURN(Shape shape, broadcastOperands(ctx, {0, 1}));
  DType dtype = isComparison(id) ? DType::kBool : ctx.operands[0].dtype;
  return std::vector<TensorType>{{dtype, shape}};
}

// Unary math: float operands; neg and relu also take integers. gelu checks its `approximate`.
Expected<std::vector<TensorType>> unaryShape(const OpContext& ctx) {
  OpId id = ctx.def.id;
  if (id == OpId::neg || id == OpId::relu)
    CLEAVE_TRY(requireNumeric(ctx, 0));
  else
    CLEAVE_TRY(requireFloat(ctx, 0));
  if (id == OpId::gelu) {
    const std::string& approximate = ctx.getString("approximate");
    if (approximate != "none" && approximate != "tanh")
      return attrError(ctx, "approximate", "is \"" + approximate + "\", must be \"none\" or \"tanh\"");
  }
  return std::vector<TensorType>{ctx.operands[0]};
}

// clip: numbers, with min <= max (neither NaN).
Expected<std::vector<TensorType>> clipShape(const OpContext& ctx) {
  CLEAVE_TRY(requireNumeric(ctx, 0));
  double min = ctx.getFloat("min"), max = ctx.getFloat("max");
  if (std::isnan(min)) return attrError(ctx, "min", "is NaN");
  if (std::isnan(max)) return attrError(ctx, "max", "is NaN");
  if (min > max) return attrError(ctx, "min", "is " + std::to_string(min) + ", above 'max' " + std::to_string(max));
  return std::vector<TensorType>{ctx.operands[0]};
}

// cast: any dtype to the dtype named by `to`.
Expected<std::vector<TensorType>> castShape(const OpContext& ctx) {
  const std::string& to = ctx.getString("to");
  std::optional<DType> dtype = parseDType(to);
  if (!dtype) return attrError(ctx, "to", "is \"" + to + "\", not a dtype (f32, f16, bf16, f64, i64, i32, i8, u8, bool)");
  return std::vector<TensorType>{{*dtype, ctx.operands[0].shape}};
}

// where: bool condition, two branches of one dtype, all three broadcast.
Expected<std::vector<TensorType>> whereShape(const OpContext& ctx) {
  if (ctx.operands[0].dtype != DType::kBool) return operandDTypeError(ctx, 0, "needs bool (it is the condition)");
  CLEAVE_TRY(requireSameDType(ctx, 2, 1));
  CLEAVE_ASSIGN_OR_RETURN(Shape shape, broadcastOperands(ctx, {0, 1, 2}));
  return std::vector<TensorType>{{ctx.operands[1].dtype, shape}};
}

// dropout: float operand, ratio in [0, 1).
Expected<std::vector<TensorType>> dropoutShape(const OpContext& ctx) {
  CLEAVE_TRY(requireFloat(ctx, 0));
  double ratio = ctx.getFloat("ratio");
  if (!(ratio >= 0 && ratio < 1)) return attrError(ctx, "ratio", "is " + std::to_string(ratio) + ", must be in [0, 1)");
  return std::vector<TensorType>{ctx.operands[0]};
}

// identity: any operand, same type.
Expected<std::vector<TensorType>> identityShape(const OpContext& ctx) {
  return std::vector<TensorType>{ctx.operands[0]};
}

OpCost elementwiseCost(const OpContext& ctx) { return perElementCost(ctx, flopsPerElement(ctx.def.id)); }

// identity's result can alias its operand: no FLOPs and no bytes moved.
OpCost identityCost(const OpContext&) { return {}; }

OpDef binaryOp(OpId id, std::string_view name, std::string_view summary) {
  return OpDef{.id = id,
               .name = name,
               .summary = summary,
               .min_operands = 2,
               .max_operands = 2,
               .attrs = {},
               .shape = checkedShapeRule<binaryShape>,
               .cost = elementwiseCost,
               .sharding = broadcastShardingRule};
}

OpDef unaryOp(OpId id, std::string_view name, std::string_view summary) {
  return OpDef{.id = id,
               .name = name,
               .summary = summary,
               .attrs = {},
               .shape = checkedShapeRule<unaryShape>,
               .cost = elementwiseCost,
               .sharding = broadcastShardingRule};
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----
// Binary ops broadcast (numpy rules): each operand's gradient is summed back to its shape.

Status addGradient(GradientContext& g) {
  g.operand_grads[0] = g.reduceToShape(dy(g), shapeOf(g, g.operand(0)));
  g.operand_grads[1] = g.reduceToShape(dy(g), shapeOf(g, g.operand(1)));
  return g.status;
}

Status subGradient(GradientContext& g) {
  g.operand_grads[0] = g.reduceToShape(dy(g), shapeOf(g, g.operand(0)));
  g.operand_grads[1] = g.reduceToShape(g.emit(OpId::neg, {dy(g)}), shapeOf(g, g.operand(1)));
  return g.status;
}

Status mulGradient(GradientContext& g) {
  ValueId a = g.operand(0), b = g.operand(1);
  g.operand_grads[0] = g.reduceToShape(g.emit(OpId::mul, {dy(g), b}), shapeOf(g, a));
  g.operand_grads[1] = g.reduceToShape(g.emit(OpId::mul, {dy(g), a}), shapeOf(g, b));
  return g.status;
}

// y = a / b: da = dy / b, db = -dy · a / b² = -dy · y / b.
Status divGradient(GradientContext& g) {
  ValueId a = g.operand(0), b = g.operand(1), y = g.result(0);
  g.operand_grads[0] = g.reduceToShape(g.emit(OpId::div, {dy(g), b}), shapeOf(g, a));
  ValueId db = g.emit(OpId::neg, {g.emit(OpId::div, {g.emit(OpId::mul, {dy(g), y}), b})});
  g.operand_grads[1] = g.reduceToShape(db, shapeOf(g, b));
  return g.status;
}

// y = a^b: da = dy · b · a^(b−1), db = dy · y · log(a) (NaN where a < 0, as in PyTorch).
Status powGradient(GradientContext& g) {
  ValueId a = g.operand(0), b = g.operand(1), y = g.result(0);
  DType dtype = dtypeOf(g, a);
  ValueId a_to_b_minus_1 = g.emit(OpId::pow, {a, g.emit(OpId::sub, {b, g.scalar(1.0, dtype)})});
  ValueId da = g.emit(OpId::mul, {dy(g), g.emit(OpId::mul, {b, a_to_b_minus_1})});
  ValueId db = g.emit(OpId::mul, {dy(g), g.emit(OpId::mul, {y, g.emit(OpId::log, {a})})});
  g.operand_grads[0] = g.reduceToShape(da, shapeOf(g, a));
  g.operand_grads[1] = g.reduceToShape(db, shapeOf(g, b));
  return g.status;
}


// y = √x: dx = dy · 0.5 / y.
Status sqrtGradient(GradientContext& g) {
  ValueId y = g.result(0);
  g.operand_grads[0] = g.emit(OpId::div, {g.emit(OpId::mul, {dy(g), g.scalar(0.5, dtypeOf(g, y))}), y});
  return g.status;
}

Status expGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), g.result(0)});
  return g.status;
}

Status logGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::div, {dy(g), g.operand(0)});
  return g.status;
}

Status negGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::neg, {dy(g)});
  return g.status;
}

// erf'(x) = 2/√π · exp(−x²).
Status erfGradient(GradientContext& g) {
  ValueId x = g.operand(0);
  ValueId gaussian = g.emit(OpId::exp, {g.emit(OpId::neg, {g.emit(OpId::mul, {x, x})})});
  ValueId scale = g.scalar(2.0 * std::numbers::inv_sqrtpi, dtypeOf(g, x));
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), g.emit(OpId::mul, {gaussian, scale})});
  return g.status;
}

Status tanhGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::tanh_grad, {dy(g), g.result(0)});
  return g.status;
}

Status sigmoidGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::sigmoid_grad, {dy(g), g.result(0)});
  return g.status;
}

Status reluGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::relu_grad, {dy(g), g.operand(0)});
  return g.status;
}

Status geluGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::gelu_grad, {dy(g), g.operand(0)}, copyAttrs(g, {"approximate"}));
  return g.status;
}

// dy passes where min <= x <= max (boundaries included, as PyTorch's clamp), zero elsewhere.
Status clipGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  ValueId x = g.operand(0);
  DType dtype = dtypeOf(g, x);
  double min = attrs.getFloat("min"), max = attrs.getFloat("max");
  ValueId dx = dy(g);
  ValueId zero = g.scalar(0.0, dtype);
  if (min != -INFINITY) dx = g.emit(OpId::where, {g.emit(OpId::less, {x, g.scalar(min, dtype)}), zero, dx});
  if (max != INFINITY) dx = g.emit(OpId::where, {g.emit(OpId::greater, {x, g.scalar(max, dtype)}), zero, dx});
  g.operand_grads[0] = dx;
  return g.status;
}

// The gradient is cast back to the operand's dtype (a cast from an integer carries none).
Status castGradient(GradientContext& g) {
  DType from = dtypeOf(g, g.operand(0));
  if (isFloat(from)) g.operand_grads[0] = g.emit(OpId::cast, {dy(g)}, {{"to", std::string(dtypeName(from))}});
  return g.status;
}

// dy goes to a where cond holds and to b elsewhere; the condition gets none.
Status whereGradient(GradientContext& g) {
  ValueId cond = g.operand(0), a = g.operand(1), b = g.operand(2);
  ValueId zero = g.scalar(0.0, dtypeOf(g, a));
  g.operand_grads[1] = g.reduceToShape(g.emit(OpId::where, {cond, dy(g), zero}), shapeOf(g, a));
  g.operand_grads[2] = g.reduceToShape(g.emit(OpId::where, {cond, zero, dy(g)}), shapeOf(g, b));
  return g.status;
}

Status identityGradient(GradientContext& g) {
  g.operand_grads[0] = dy(g);
  return g.status;
}

// Dropout with ratio 0 is the identity; a random mask would need the forward mask kept for the
// backward pass, which the op does not provide yet.
Status dropoutGradient(GradientContext& g) {
  if (forwardAttrs(g).getFloat("ratio") != 0.0)
    return Status::badInput(nodeContext(g.graph, g.node) +
                            "dropout with ratio > 0 cannot be trained yet (set ratio = 0 or remove the dropout)");
  g.operand_grads[0] = dy(g);
  return g.status;
}

}  // namespace

void addElementwiseOps(std::vector<OpDef>& table) {
  table.push_back(binaryOp(OpId::add, "add", "a + b, broadcasting"));
  table.push_back(binaryOp(OpId::sub, "sub", "a - b, broadcasting"));
  table.push_back(binaryOp(OpId::mul, "mul", "a * b, broadcasting"));
  table.push_back(binaryOp(OpId::div, "div", "a / b, broadcasting"));
  table.push_back(binaryOp(OpId::pow, "pow", "a raised to the power b, broadcasting"));
  table.push_back(binaryOp(OpId::equal, "equal", "a == b as bool, broadcasting"));
  table.push_back(binaryOp(OpId::less, "less", "a < b as bool, broadcasting"));
  table.push_back(binaryOp(OpId::less_equal, "less_equal", "a <= b as bool, broadcasting"));
  table.push_back(binaryOp(OpId::greater, "greater", "a > b as bool, broadcasting"));
  table.push_back(binaryOp(OpId::greater_equal, "greater_equal", "a >= b as bool, broadcasting"));

  table.push_back(unaryOp(OpId::sqrt, "sqrt", "square root"));
  table.push_back(unaryOp(OpId::exp, "exp", "e to the power x"));
  table.push_back(unaryOp(OpId::log, "log", "natural logarithm"));
  table.push_back(unaryOp(OpId::neg, "neg", "-x"));
  table.push_back(unaryOp(OpId::erf, "erf", "the error function"));
  table.push_back(unaryOp(OpId::tanh, "tanh", "hyperbolic tangent"));
  table.push_back(unaryOp(OpId::sigmoid, "sigmoid", "1 / (1 + exp(-x))"));
  table.push_back(unaryOp(OpId::relu, "relu", "max(x, 0)"));
  OpDef gelu = unaryOp(OpId::gelu, "gelu", "x * Phi(x), exact (erf) or tanh-approximated");
  gelu.attrs = {optionalString("approximate", "none")};
  table.push_back(std::move(gelu));

  constexpr double kInf = std::numeric_limits<double>::infinity();
  table.push_back(OpDef{.id = OpId::clip,
                        .name = "clip",
                        .summary = "clamps x to [min, max]",
                        .attrs = {optionalFloat("min", -kInf), optionalFloat("max", kInf)},
                        .shape = checkedShapeRule<clipShape>,
                        .cost = elementwiseCost,
                        .sharding = broadcastShardingRule});
  table.push_back(OpDef{.id = OpId::cast,
                        .name = "cast",
                        .summary = "converts x to dtype `to`",
                        .attrs = {requiredAttr("to", AttrKind::kString)},
                        .shape = checkedShapeRule<castShape>,
                        .cost = elementwiseCost,
                        .sharding = broadcastShardingRule});
  table.push_back(OpDef{.id = OpId::where,
                        .name = "where",
                        .summary = "a where cond is true, else b, broadcasting",
                        .min_operands = 3,
                        .max_operands = 3,
                        .attrs = {},
                        .shape = checkedShapeRule<whereShape>,
                        .cost = elementwiseCost,
                        .sharding = broadcastShardingRule});
  table.push_back(OpDef{.id = OpId::dropout,
                        .name = "dropout",
                        .summary = "zeroes elements with probability ratio and scales the rest by 1/(1-ratio)",
                        .attrs = {optionalFloat("ratio", 0.5), optionalInt("seed", 0)},
                        .shape = checkedShapeRule<dropoutShape>,
                        .cost = elementwiseCost,
                        .sharding = broadcastShardingRule});
  table.push_back(OpDef{.id = OpId::identity,
                        .name = "identity",
                        .summary = "x unchanged",
                        .attrs = {},
                        .shape = checkedShapeRule<identityShape>,
                        .cost = identityCost,
                        .sharding = broadcastShardingRule});

  // Kernels that may write their result over a same-typed operand (see docs/ops.md).
  for (OpId id : {OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::neg, OpId::sqrt, OpId::exp, OpId::log,
                  OpId::sigmoid, OpId::tanh, OpId::relu, OpId::clip})
    appendedDef(table, id).in_place = true;
  appendedDef(table, OpId::identity).view = true;
  appendedDef(table, OpId::dropout).random = true;

  // Gradient rules.
  appendedDef(table, OpId::add).gradient = addGradient;
  appendedDef(table, OpId::sub).gradient = subGradient;
  appendedDef(table, OpId::mul).gradient = mulGradient;
  appendedDef(table, OpId::div).gradient = divGradient;
  appendedDef(table, OpId::pow).gradient = powGradient;
  appendedDef(table, OpId::sqrt).gradient = sqrtGradient;
  appendedDef(table, OpId::exp).gradient = expGradient;
  appendedDef(table, OpId::log).gradient = logGradient;
  appendedDef(table, OpId::neg).gradient = negGradient;
  appendedDef(table, OpId::erf).gradient = erfGradient;
  appendedDef(table, OpId::tanh).gradient = tanhGradient;
  appendedDef(table, OpId::sigmoid).gradient = sigmoidGradient;
  appendedDef(table, OpId::relu).gradient = reluGradient;
  appendedDef(table, OpId::gelu).gradient = geluGradient;
  appendedDef(table, OpId::clip).gradient = clipGradient;
  appendedDef(table, OpId::cast).gradient = castGradient;
  appendedDef(table, OpId::where).gradient = whereGradient;
  appendedDef(table, OpId::identity).gradient = identityGradient;
  appendedDef(table, OpId::dropout).gradient = dropoutGradient;
}

}  // namespace cleave::ops
