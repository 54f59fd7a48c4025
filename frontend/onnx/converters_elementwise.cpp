// ONNX converters of elementwise arithmetic, comparison and logic: Add, Pow, Clip, Max, And, IsInf, Cast, ...
#include <cmath>
#include <limits>

#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// Pow's exponent may have another dtype in ONNX; it is converted to the base's (folded when constant).
Status convertPow(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  std::vector<std::string> inputs = allInputs(node);
  CLEAVE_ASSIGN_OR_RETURN(TensorType base, ctx.typeOf(node, inputs[0]));
  CLEAVE_ASSIGN_OR_RETURN(TensorType exponent, ctx.typeOf(node, inputs[1]));
  if (exponent.dtype != base.dtype) {
    std::string converted = node.output(0) + "/exponent";
    CLEAVE_TRY(ctx.emitTo(node, OpId::cast, {inputs[1]}, {{"to", std::string(dtypeName(base.dtype))}}, {converted}));
    inputs[1] = converted;
  }
  return ctx.emit(node, OpId::pow, inputs, {});
}

// Clip's bounds are constant inputs (since opset 11), which become the clip op's attributes.
// A min above max gives max everywhere (ONNX's and numpy's rule: the max bound is applied last).
Status convertClip(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs;
  if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(attrs["min"], ctx.constantScalar(node, 1));
  }
  if (hasInput(node, 2)) {
    CLEAVE_ASSIGN_OR_RETURN(attrs["max"], ctx.constantScalar(node, 2));
  }
  if (attrs.count("min") && attrs.count("max") && std::get<double>(attrs["min"]) > std::get<double>(attrs["max"]))
    attrs["min"] = attrs["max"];
  return ctx.emit(node, OpId::clip, {node.input(0)}, attrs);
}

// not(x) is equal(x, false); it folds when x is a constant.
Status convertNot(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  auto false_scalar = std::make_shared<TensorData>();
  false_scalar->type = {DType::kBool, {}};
  false_scalar->bytes = {0};
  std::string false_name = node.output(0) + "/false";
  ctx.bindConstant(false_name, false_scalar);
  return ctx.emit(node, OpId::equal, {node.input(0), false_name}, {});
}

Status convertCast(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  auto dtype = dtypeFromOnnx(static_cast<int32_t>(intAttr(node, "to", 0)));
  if (!dtype)
    return ctx.nodeError(node, "cast to ONNX data type " + std::to_string(intAttr(node, "to", 0)) + " is not supported");
  return ctx.emit(node, OpId::cast, {node.input(0)}, {{"to", std::string(dtypeName(*dtype))}});
}

Status convertCastLike(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(TensorType like, ctx.typeOf(node, node.input(1)));
  return c.finish(OpId::cast, {c.x()}, {{"to", std::string(dtypeName(like.dtype))}});
}

Status convertAbs(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string result, c.absolute());
  return c.finish(OpId::identity, {result});
}

Status convertReciprocal(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string one, c.filled(1, c.dtype()));
  return c.finish(OpId::div, {one, c.x()});
}

Status convertSign(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string one, c.filled(1, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string minus_one, c.filled(-1, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string positive, c.apply(OpId::greater, {c.x(), zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string negative, c.apply(OpId::less, {c.x(), zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string non_positive, c.apply(OpId::where, {negative, minus_one, zero}));
  return c.finish(OpId::where, {positive, one, non_positive});
}

// Max and Min of any number of inputs: where(a >= b, a, b) (<= for Min), folded left to right.
Status extremum(OnnxImportContext& ctx, const onnx::NodeProto& node, OpId keep_left) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  std::string result = c.x();
  for (int i = 1; i < node.input_size(); ++i) {
    CLEAVE_ASSIGN_OR_RETURN(std::string keep, c.apply(keep_left, {result, node.input(i)}));
    CLEAVE_ASSIGN_OR_RETURN(result, c.apply(OpId::where, {keep, result, node.input(i)}));
  }
  return c.finish(OpId::identity, {result});
}
Status convertMax(OnnxImportContext& ctx, const onnx::NodeProto& node) { return extremum(ctx, node, OpId::greater_equal); }
Status convertMin(OnnxImportContext& ctx, const onnx::NodeProto& node) { return extremum(ctx, node, OpId::less_equal); }

// Sum and Mean of any number of inputs: added left to right (Mean then divides by their count).
Status sumOfInputs(OnnxImportContext& ctx, const onnx::NodeProto& node, bool mean) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  std::string result = c.x();
  for (int i = 1; i < node.input_size(); ++i) {
    CLEAVE_ASSIGN_OR_RETURN(result, c.apply(OpId::add, {result, node.input(i)}));
  }
  if (!mean) return c.finish(OpId::identity, {result});
  CLEAVE_ASSIGN_OR_RETURN(std::string count, c.filled(node.input_size(), c.dtype()));
  return c.finish(OpId::div, {result, count});
}
Status convertSum(OnnxImportContext& ctx, const onnx::NodeProto& node) { return sumOfInputs(ctx, node, false); }
Status convertMean(OnnxImportContext& ctx, const onnx::NodeProto& node) { return sumOfInputs(ctx, node, true); }

// a and b = where(a, b, false); a or b = where(a, true, b); a xor b = ((a == b) == false).
Status convertAnd(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  return c.finish(OpId::where, {c.x(), node.input(1), no});
}
Status convertOr(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string yes, c.filled(1, DType::kBool));
  return c.finish(OpId::where, {c.x(), yes, node.input(1)});
}
Status convertXor(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  CLEAVE_ASSIGN_OR_RETURN(std::string same, c.apply(OpId::equal, {c.x(), node.input(1)}));
  return c.finish(OpId::equal, {same, no});
}

// Mod: the remainder of a / b with the sign of b (fmod=0, Python's %: integers, and floats as ONNX
// Runtime takes them) or of a (fmod=1, C's fmod). Composed: r = a - b·q with q the quotient
// truncated toward zero (integer div truncates; floats through floor and ceil), then for fmod=0 r + b
// where r is non-zero and its sign differs from b's; a finite float over an infinite one as opset 28
// says (below). Folds when both are constants (ViT's shape arithmetic).
Status convertMod(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const std::string &a = c.x(), &b = node.input(1);
  const bool c_style = intAttr(node, "fmod", 0) != 0;
  CLEAVE_ASSIGN_OR_RETURN(std::string quotient, c.apply(OpId::div, {a, b}));
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  if (isFloat(c.dtype())) {
    CLEAVE_ASSIGN_OR_RETURN(std::string negative, c.apply(OpId::less, {quotient, zero}));
    CLEAVE_ASSIGN_OR_RETURN(std::string up, c.apply(OpId::ceil, {quotient}));
    CLEAVE_ASSIGN_OR_RETURN(std::string down, c.apply(OpId::floor, {quotient}));
    CLEAVE_ASSIGN_OR_RETURN(quotient, c.apply(OpId::where, {negative, up, down}));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string whole, c.apply(OpId::mul, {b, quotient}));
  CLEAVE_ASSIGN_OR_RETURN(std::string remainder, c.apply(OpId::sub, {a, whole}));
  // A finite a over an infinite b (where b·q is inf·0): fmod=1 gives a; fmod=0 gives a when a is 0 or
  // has b's sign, else b (opset 28's special cases).
  std::string finite_over_infinite;
  if (isFloat(c.dtype())) {
    CLEAVE_ASSIGN_OR_RETURN(std::string inf, c.filled(std::numeric_limits<double>::infinity(), c.dtype()));
    CLEAVE_ASSIGN_OR_RETURN(std::string a_size, c.absolute(a));
    CLEAVE_ASSIGN_OR_RETURN(std::string b_size, c.absolute(b));
    CLEAVE_ASSIGN_OR_RETURN(std::string a_finite, c.apply(OpId::less, {a_size, inf}));
    CLEAVE_ASSIGN_OR_RETURN(std::string b_infinite, c.apply(OpId::equal, {b_size, inf}));
    CLEAVE_ASSIGN_OR_RETURN(finite_over_infinite, c.apply(OpId::where, {a_finite, b_infinite, a_finite}));
  }
  if (c_style) {
    if (finite_over_infinite.empty()) return c.finish(OpId::identity, {remainder});
    return c.finish(OpId::where, {finite_over_infinite, a, remainder});
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string r_negative, c.apply(OpId::less, {remainder, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string b_negative, c.apply(OpId::less, {b, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string same_sign, c.apply(OpId::equal, {r_negative, b_negative}));
  CLEAVE_ASSIGN_OR_RETURN(std::string r_zero, c.apply(OpId::equal, {remainder, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string keep, c.apply(OpId::where, {r_zero, r_zero, same_sign}));
  CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::add, {remainder, b}));
  if (finite_over_infinite.empty()) return c.finish(OpId::where, {keep, remainder, shifted});
  CLEAVE_ASSIGN_OR_RETURN(std::string floored, c.apply(OpId::where, {keep, remainder, shifted}));
  CLEAVE_ASSIGN_OR_RETURN(std::string a_negative, c.apply(OpId::less, {a, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string a_zero, c.apply(OpId::equal, {a, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string signs_agree, c.apply(OpId::equal, {a_negative, b_negative}));
  CLEAVE_ASSIGN_OR_RETURN(std::string keep_a, c.apply(OpId::where, {a_zero, a_zero, signs_agree}));
  CLEAVE_ASSIGN_OR_RETURN(std::string limit, c.apply(OpId::where, {keep_a, a, b}));
  return c.finish(OpId::where, {finite_over_infinite, limit, floored});
}

Status convertIsNaN(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  CLEAVE_ASSIGN_OR_RETURN(std::string self_equal, c.apply(OpId::equal, {c.x(), c.x()}));
  return c.finish(OpId::equal, {self_equal, no});
}

Status convertIsInf(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  bool positive = intAttr(node, "detect_positive", 1) != 0, negative = intAttr(node, "detect_negative", 1) != 0;
  CLEAVE_ASSIGN_OR_RETURN(std::string plus_inf, c.filled(INFINITY, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string minus_inf, c.filled(-INFINITY, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string is_plus, c.apply(OpId::equal, {c.x(), plus_inf}));
  CLEAVE_ASSIGN_OR_RETURN(std::string is_minus, c.apply(OpId::equal, {c.x(), minus_inf}));
  CLEAVE_ASSIGN_OR_RETURN(std::string yes, c.filled(1, DType::kBool));
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  if (positive && negative) return c.finish(OpId::where, {is_plus, yes, is_minus});
  return c.finish(OpId::where, {positive ? is_plus : is_minus, yes, no});
}

constexpr OnnxConverter kElementwiseConverters[] = {
    {"Abs", convertAbs},
    {"Add", convertOneToOne<OpId::add>},
    {"And", convertAnd},
    {"Cast", convertCast},
    {"CastLike", convertCastLike},
    {"Clip", convertClip},
    {"Acos", convertOneToOne<OpId::acos>},
    {"Acosh", convertOneToOne<OpId::acosh>},
    {"Asin", convertOneToOne<OpId::asin>},
    {"Asinh", convertOneToOne<OpId::asinh>},
    {"Atan", convertOneToOne<OpId::atan>},
    {"Atanh", convertOneToOne<OpId::atanh>},
    {"Ceil", convertOneToOne<OpId::ceil>},
    {"Cos", convertOneToOne<OpId::cos>},
    {"Cosh", convertOneToOne<OpId::cosh>},
    {"Div", convertOneToOne<OpId::div>},
    {"Equal", convertOneToOne<OpId::equal>},
    {"Erf", convertOneToOne<OpId::erf>},
    {"Exp", convertOneToOne<OpId::exp>},
    {"Floor", convertOneToOne<OpId::floor>},
    {"Greater", convertOneToOne<OpId::greater>},
    {"GreaterOrEqual", convertOneToOne<OpId::greater_equal>},
    {"IsInf", convertIsInf},
    {"IsNaN", convertIsNaN},
    {"Less", convertOneToOne<OpId::less>},
    {"LessOrEqual", convertOneToOne<OpId::less_equal>},
    {"Log", convertOneToOne<OpId::log>},
    {"Max", convertMax},
    {"Mean", convertMean},
    {"Min", convertMin},
    {"Mod", convertMod},
    {"Mul", convertOneToOne<OpId::mul>},
    {"Neg", convertOneToOne<OpId::neg>},
    {"Not", convertNot},
    {"Or", convertOr},
    {"Pow", convertPow},
    {"Reciprocal", convertReciprocal},
    {"Round", convertOneToOne<OpId::round>},
    {"Sign", convertSign},
    {"Sin", convertOneToOne<OpId::sin>},
    {"Sinh", convertOneToOne<OpId::sinh>},
    {"Sqrt", convertOneToOne<OpId::sqrt>},
    {"Sub", convertOneToOne<OpId::sub>},
    {"Tan", convertOneToOne<OpId::tan>},
    {"Sum", convertSum},
    {"Where", convertOneToOne<OpId::where>},
    {"Xor", convertXor},
};

}  // namespace

std::span<const OnnxConverter> elementwiseConverters() { return kElementwiseConverters; }

}  // namespace cleave
