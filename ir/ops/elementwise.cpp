// Elementwise ops: binary arithmetic, comparisons, unary math, clip, cast, where, dropout, identity.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>

#include "ir/ops/float_to_integer.h"
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"

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
    case OpId::sin:
    case OpId::cos:
    case OpId::tan:
    case OpId::asin:
    case OpId::acos:
    case OpId::atan:
    case OpId::sinh:
    case OpId::cosh:
    case OpId::asinh:
    case OpId::acosh:
    case OpId::atanh:
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

// dropout at inference (as the kernels run it): the operand unchanged.
Expected<std::vector<TensorData>> copyReference(const OpContext&, std::span<const TensorData* const> operands) {
  return std::vector<TensorData>{*operands[0]};
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

// sin' = cos, cos' = −sin.
Status sinGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), g.emit(OpId::cos, {g.operand(0)})});
  return g.status;
}

Status cosGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::neg, {g.emit(OpId::mul, {dy(g), g.emit(OpId::sin, {g.operand(0)})})});
  return g.status;
}

// tan' = 1 + tan², sinh' = cosh, cosh' = sinh.
Status tanGradient(GradientContext& g) {
  ValueId y = g.result(0);
  ValueId slope = g.emit(OpId::add, {g.emit(OpId::mul, {y, y}), g.scalar(1.0, dtypeOf(g, y))});
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), slope});
  return g.status;
}

Status sinhGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), g.emit(OpId::cosh, {g.operand(0)})});
  return g.status;
}

Status coshGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::mul, {dy(g), g.emit(OpId::sinh, {g.operand(0)})});
  return g.status;
}

// The inverse functions' derivatives are sign · dy / f(x²) with f(x²) = c + s·x² (then √ where `root`):
// asin 1/√(1−x²), acos −1/√(1−x²), atan 1/(1+x²), asinh 1/√(x²+1), acosh 1/√(x²−1), atanh 1/(1−x²).
template <int kSign, int kConstant, int kSquareSign, bool kRoot>
Status inverseGradient(GradientContext& g) {
  ValueId x = g.operand(0);
  const DType dtype = dtypeOf(g, x);
  ValueId square = g.emit(OpId::mul, {x, x});
  if (kSquareSign < 0) square = g.emit(OpId::neg, {square});
  ValueId denominator = g.emit(OpId::add, {square, g.scalar(kConstant, dtype)});
  if (kRoot) denominator = g.emit(OpId::sqrt, {denominator});
  ValueId dx = g.emit(OpId::div, {dy(g), denominator});
  g.operand_grads[0] = kSign < 0 ? g.emit(OpId::neg, {dx}) : dx;
  return g.status;
}

// floor, ceil and round are flat almost everywhere: zero, as PyTorch's gradients of them.
Status flatGradient(GradientContext& g) {
  g.operand_grads[0] = zeros(g, g.typeOf(g.operand(0)));
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

// ---- Reference evaluation (see ir/ops/reference_support.h) ----
// Integer division truncates toward zero; float ops compute in the operand's own type.

// base^exponent for integers: exact (wrapping) for exponent ≥ 0, truncated 1/base^|exponent| below.
template <class T>
T integerPow(T base, T exponent) {
  if (exponent < 0) return base == 1 ? 1 : base == -1 ? (exponent % 2 == 0 ? 1 : -1) : 0;
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = wrappingMul(result, base);
    base = wrappingMul(base, base);
    exponent >>= 1;
  }
  return result;
}

// One arithmetic op on two elements; sets `error` instead of dividing an integer by zero.
template <class T>
T arithmetic(OpId op, T a, T b, const char*& error) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case OpId::add: return a + b;
      case OpId::sub: return a - b;
      case OpId::mul: return a * b;
      case OpId::div: return a / b;
      default: return std::pow(a, b);
    }
  } else {
    switch (op) {
      case OpId::add: return wrappingAdd(a, b);
      case OpId::sub: return wrappingSub(a, b);
      case OpId::mul: return wrappingMul(a, b);
      case OpId::div:
        if (b == 0) {
          error = "integer division by zero";
          return 0;
        }
        return b == -1 ? wrappingSub(T{0}, a) : static_cast<T>(a / b);  // -1: INT_MIN / -1 wraps
      default:
        if (a == 0 && b < 0) {
          error = "zero raised to a negative integer power";
          return 0;
        }
        return integerPow(a, b);
    }
  }
}

uint8_t compare(OpId op, auto a, auto b) {
  switch (op) {
    case OpId::equal: return a == b;
    case OpId::less: return a < b;
    case OpId::less_equal: return a <= b;
    case OpId::greater: return a > b;
    default: return a >= b;  // greater_equal
  }
}

// add, sub, mul, div, pow and the comparisons, broadcasting.
Expected<std::vector<TensorData>> binaryReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const OpId op = ctx.def.id;
  const TensorData &a = *operands[0], &b = *operands[1];
  const TensorType& result = ctx.results[0];
  const std::vector<int64_t> a_index = broadcastSourceIndices(a.type.shape, result.shape);
  const std::vector<int64_t> b_index = broadcastSourceIndices(b.type.shape, result.shape);
  const bool is_comparison = result.dtype == DType::kBool;
  return single(visitDType(a.type.dtype, [&]<class T>(T) -> Expected<TensorData> {
    const std::vector<T> lhs = readElements<T>(a), rhs = readElements<T>(b);
    if (is_comparison) {
      std::vector<uint8_t> out(a_index.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = compare(op, lhs[a_index[i]], rhs[b_index[i]]);
      return makeTensor(result, out);
    }
    if constexpr (std::is_same_v<T, uint8_t>) {
      return Status::internal("constant evaluation: arithmetic on bool");
    } else {
      const char* error = nullptr;
      std::vector<T> out(a_index.size());
      for (size_t i = 0; i < out.size() && !error; ++i) out[i] = arithmetic(op, lhs[a_index[i]], rhs[b_index[i]], error);
      if (error) return referenceError(ctx, error);
      return makeTensor(result, out);
    }
  }));
}

// One float unary op on x; gelu's form and clip's bounds come from the node's attributes.
template <class T>
T floatUnary(OpId op, T x, const OpContext& ctx) {
  switch (op) {
    case OpId::sqrt: return std::sqrt(x);
    case OpId::exp: return std::exp(x);
    case OpId::log: return std::log(x);
    case OpId::erf: return std::erf(x);
    case OpId::sin: return std::sin(x);
    case OpId::cos: return std::cos(x);
    case OpId::tan: return std::tan(x);
    case OpId::asin: return std::asin(x);
    case OpId::acos: return std::acos(x);
    case OpId::atan: return std::atan(x);
    case OpId::sinh: return std::sinh(x);
    case OpId::cosh: return std::cosh(x);
    case OpId::asinh: return std::asinh(x);
    case OpId::acosh: return std::acosh(x);
    case OpId::atanh: return std::atanh(x);
    case OpId::floor: return std::floor(x);
    case OpId::ceil: return std::ceil(x);
    case OpId::round: return std::nearbyint(x);
    case OpId::tanh: return std::tanh(x);
    case OpId::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case OpId::gelu:
      if (ctx.getString("approximate") == "tanh") {
        const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
        return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
      }
      return T(0.5) * x * (T(1) + std::erf(x / std::numbers::sqrt2_v<T>));
    default: {  // clip; a NaN stays NaN
      const T low = static_cast<T>(ctx.getFloat("min")), high = static_cast<T>(ctx.getFloat("max"));
      return std::min(std::max(x, low), high);
    }
  }
}

// The unary math ops and clip.
Expected<std::vector<TensorData>> unaryReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const OpId op = ctx.def.id;
  return single(visitDType(operands[0]->type.dtype, [&]<class T>(T) -> TensorData {
    std::vector<T> elements = readElements<T>(*operands[0]);
    for (T& e : elements) {
      if (op == OpId::neg) {
        if constexpr (std::is_integral_v<T>) e = wrappingSub(T{0}, e);
        else e = -e;
      } else if (op == OpId::relu) {
        e = e < T{0} ? T{0} : e;  // keeps NaN
      } else if constexpr (std::is_floating_point_v<T>) {
        e = floatUnary(op, e, ctx);
      }
    }
    return makeTensor(ctx.results[0], elements);
  }));
}

// cast: float→int as PyTorch does it (ir/ops/float_to_integer.h), int→int wraps, anything→bool is
// "≠ 0", bool→anything is 0 or 1.
template <class To, class From>
To convertElement(From value, bool to_bool) {
  if (to_bool) return value != From{0} ? 1 : 0;
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) return floatToInteger<To>(static_cast<double>(value));
  else return static_cast<To>(value);
}

Expected<std::vector<TensorData>> castReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const TensorType& result = ctx.results[0];
  const bool to_bool = result.dtype == DType::kBool;
  return single(visitDType(x.type.dtype, [&]<class From>(From) -> Expected<TensorData> {
    const std::vector<From> in = readElements<From>(x);
    return visitDType(result.dtype, [&]<class To>(To) -> Expected<TensorData> {
      std::vector<To> out(in.size());
      for (size_t i = 0; i < in.size(); ++i) out[i] = convertElement<To>(in[i], to_bool);
      return makeTensor(result, out);
    });
  }));
}

Expected<std::vector<TensorData>> whereReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData &cond = *operands[0], &a = *operands[1], &b = *operands[2];
  const TensorType& result = ctx.results[0];
  const std::vector<int64_t> cond_index = broadcastSourceIndices(cond.type.shape, result.shape);
  const std::vector<int64_t> a_index = broadcastSourceIndices(a.type.shape, result.shape);
  const std::vector<int64_t> b_index = broadcastSourceIndices(b.type.shape, result.shape);
  const size_t size = static_cast<size_t>(dtypeSize(result.dtype));
  TensorData out{result, std::vector<uint8_t>(cond_index.size() * size)};
  for (size_t i = 0; i < cond_index.size(); ++i) {
    const bool take_a = cond.bytes[cond_index[i]] != 0;
    const uint8_t* from = take_a ? a.bytes.data() + a_index[i] * size : b.bytes.data() + b_index[i] * size;
    std::memcpy(out.bytes.data() + i * size, from, size);
  }
  return std::vector<TensorData>{std::move(out)};
}

// Sets the references constant folding uses.
void addElementwiseReferences(std::vector<OpDef>& table) {
  for (OpId id : {OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::pow, OpId::less, OpId::less_equal, OpId::greater,
                  OpId::greater_equal})
    setFoldingReference(table, id, binaryReference, referenceNumeric);
  setFoldingReference(table, OpId::equal, binaryReference, referenceDTypes);  // also bool
  for (OpId id : {OpId::neg, OpId::relu}) setFoldingReference(table, id, unaryReference, referenceNumeric);
  for (OpId id : {OpId::sqrt, OpId::exp, OpId::log, OpId::erf, OpId::sin, OpId::cos, OpId::tan, OpId::asin, OpId::acos, OpId::atan, OpId::sinh, OpId::cosh, OpId::asinh, OpId::acosh, OpId::atanh, OpId::floor, OpId::ceil, OpId::round,
                  OpId::tanh, OpId::sigmoid,
                  OpId::gelu, OpId::clip})
    setFoldingReference(table, id, unaryReference, referenceFloat);
  setFoldingReference(table, OpId::cast, castReference, referenceDTypes);
  setFoldingReference(table, OpId::where, whereReference, referenceDTypes);
  setFoldingReference(table, OpId::identity, sameBytesReference, referenceDTypes);
  setFoldingReference(table, OpId::detach, sameBytesReference, referenceDTypes);
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
  table.push_back(unaryOp(OpId::sin, "sin", "sine (radians)"));
  table.push_back(unaryOp(OpId::cos, "cos", "cosine (radians)"));
  table.push_back(unaryOp(OpId::tan, "tan", "tangent (radians)"));
  table.push_back(unaryOp(OpId::asin, "asin", "arcsine"));
  table.push_back(unaryOp(OpId::acos, "acos", "arccosine"));
  table.push_back(unaryOp(OpId::atan, "atan", "arctangent"));
  table.push_back(unaryOp(OpId::sinh, "sinh", "hyperbolic sine"));
  table.push_back(unaryOp(OpId::cosh, "cosh", "hyperbolic cosine"));
  table.push_back(unaryOp(OpId::asinh, "asinh", "inverse hyperbolic sine"));
  table.push_back(unaryOp(OpId::acosh, "acosh", "inverse hyperbolic cosine"));
  table.push_back(unaryOp(OpId::atanh, "atanh", "inverse hyperbolic tangent"));
  table.push_back(unaryOp(OpId::floor, "floor", "the largest integer not above x"));
  table.push_back(unaryOp(OpId::ceil, "ceil", "the smallest integer not below x"));
  table.push_back(unaryOp(OpId::round, "round", "the nearest integer, halves to even"));
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
  table.push_back(OpDef{.id = OpId::detach,
                        .name = "detach",
                        .summary = "x unchanged, a constant to autodiff: no gradient passes through it (PyTorch's detach)",
                        .attrs = {},
                        .shape = checkedShapeRule<identityShape>,
                        .cost = identityCost,
                        .sharding = broadcastShardingRule});

  // Kernels that may write their result over a same-typed operand (see docs/ops.md).
  for (OpId id : {OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::neg, OpId::sqrt, OpId::exp, OpId::log,
                  OpId::sigmoid, OpId::tanh, OpId::relu, OpId::clip})
    appendedDef(table, id).in_place = true;
  // Ops the fusion pass may merge into fused nodes (their code is in runtime/codegen/fused_kernel_ir.cpp).
  for (OpId id : {OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::pow, OpId::neg, OpId::sqrt, OpId::exp, OpId::erf,
                  OpId::tanh, OpId::sigmoid, OpId::relu, OpId::gelu, OpId::clip})
    appendedDef(table, id).fusable = true;
  appendedDef(table, OpId::identity).view = true;
  appendedDef(table, OpId::detach).view = true;
  appendedDef(table, OpId::detach).stops_gradient = true;
  appendedDef(table, OpId::dropout).random = true;
  appendedDef(table, OpId::dropout).reference = copyReference;

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
  appendedDef(table, OpId::sin).gradient = sinGradient;
  appendedDef(table, OpId::cos).gradient = cosGradient;
  appendedDef(table, OpId::tan).gradient = tanGradient;
  appendedDef(table, OpId::asin).gradient = inverseGradient<1, 1, -1, true>;
  appendedDef(table, OpId::acos).gradient = inverseGradient<-1, 1, -1, true>;
  appendedDef(table, OpId::atan).gradient = inverseGradient<1, 1, 1, false>;
  appendedDef(table, OpId::sinh).gradient = sinhGradient;
  appendedDef(table, OpId::cosh).gradient = coshGradient;
  appendedDef(table, OpId::asinh).gradient = inverseGradient<1, 1, 1, true>;
  appendedDef(table, OpId::acosh).gradient = inverseGradient<1, -1, 1, true>;
  appendedDef(table, OpId::atanh).gradient = inverseGradient<1, 1, -1, false>;
  appendedDef(table, OpId::floor).gradient = flatGradient;
  appendedDef(table, OpId::ceil).gradient = flatGradient;
  appendedDef(table, OpId::round).gradient = flatGradient;
  appendedDef(table, OpId::tanh).gradient = tanhGradient;
  appendedDef(table, OpId::sigmoid).gradient = sigmoidGradient;
  appendedDef(table, OpId::relu).gradient = reluGradient;
  appendedDef(table, OpId::gelu).gradient = geluGradient;
  appendedDef(table, OpId::clip).gradient = clipGradient;
  appendedDef(table, OpId::cast).gradient = castGradient;
  appendedDef(table, OpId::where).gradient = whereGradient;
  appendedDef(table, OpId::identity).gradient = identityGradient;
  appendedDef(table, OpId::dropout).gradient = dropoutGradient;

  addElementwiseReferences(table);
}

}  // namespace cleave::ops
