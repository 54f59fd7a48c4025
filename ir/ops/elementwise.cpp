// Elementwise ops: binary arithmetic, comparisons, unary math, clip, cast, where, dropout, identity.
#include <cmath>
#include <limits>

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

// ---- Reference computations ----

// identity, and dropout at inference (as the kernels run it): the operand unchanged.
Expected<std::vector<TensorData>> copyReference(const OpContext&, std::span<const TensorData* const> operands) {
  return std::vector<TensorData>{*operands[0]};
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
  appendedDef(table, OpId::identity).reference = copyReference;
  appendedDef(table, OpId::dropout).reference = copyReference;
}

}  // namespace cleave::ops
