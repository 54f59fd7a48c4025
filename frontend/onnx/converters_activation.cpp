// ONNX converters of activations and normalised exponentials: Relu, LeakyRelu, Elu, HardSwish, Softmax, ...
#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// where(x < 0, negative, x): the shape of LeakyRelu, PRelu, Elu and Celu.
Status negativeElse(OnnxComposite& c, const std::string& negative) {
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string is_negative, c.apply(OpId::less, {c.x(), zero}));
  return c.finish(OpId::where, {is_negative, negative, c.x()});
}

// alpha * (exp(x / divisor) - 1), the negative side of Elu, Selu and Celu.
Expected<std::string> expm1Scaled(OnnxComposite& c, double alpha, double divisor) {
  std::string scaled_in = c.x();
  if (divisor != 1) {
    CLEAVE_ASSIGN_OR_RETURN(std::string d, c.filled(divisor, c.dtype()));
    CLEAVE_ASSIGN_OR_RETURN(scaled_in, c.apply(OpId::div, {c.x(), d}));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string e, c.apply(OpId::exp, {scaled_in}));
  CLEAVE_ASSIGN_OR_RETURN(std::string one, c.filled(1, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string em1, c.apply(OpId::sub, {e, one}));
  CLEAVE_ASSIGN_OR_RETURN(std::string a, c.filled(alpha, c.dtype()));
  return c.apply(OpId::mul, {em1, a});
}

Status convertLeakyRelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string slope, c.filled(floatAttr(node, "alpha", 0.01), c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string scaled, c.apply(OpId::mul, {c.x(), slope}));
  return negativeElse(c, scaled);
}

Status convertPRelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string scaled, c.apply(OpId::mul, {c.x(), node.input(1)}));
  return negativeElse(c, scaled);
}

Status convertElu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string negative, expm1Scaled(c, floatAttr(node, "alpha", 1.0), 1.0));
  return negativeElse(c, negative);
}

Status convertCelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  double alpha = floatAttr(node, "alpha", 1.0);
  CLEAVE_ASSIGN_OR_RETURN(std::string negative, expm1Scaled(c, alpha, alpha));
  return negativeElse(c, negative);
}

Status convertSelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string negative, expm1Scaled(c, floatAttr(node, "alpha", 1.67326319217681884765625), 1.0));
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string positive, c.apply(OpId::greater, {c.x(), zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string unscaled, c.apply(OpId::where, {positive, c.x(), negative}));
  CLEAVE_ASSIGN_OR_RETURN(std::string gamma, c.filled(floatAttr(node, "gamma", 1.05070102214813232421875), c.dtype()));
  return c.finish(OpId::mul, {unscaled, gamma});
}

Status convertThresholdedRelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string alpha, c.filled(floatAttr(node, "alpha", 1.0), c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string above, c.apply(OpId::greater, {c.x(), alpha}));
  return c.finish(OpId::where, {above, c.x(), zero});
}

// clip(alpha * x + beta, 0, 1); HardSwish multiplies it by x, with alpha 1/6 and beta 1/2.
Status hardGate(OnnxImportContext& ctx, const onnx::NodeProto& node, bool swish) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string alpha, c.filled(swish ? 1.0 / 6 : floatAttr(node, "alpha", 0.2), c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string beta, c.filled(swish ? 0.5 : floatAttr(node, "beta", 0.5), c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string scaled, c.apply(OpId::mul, {c.x(), alpha}));
  CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::add, {scaled, beta}));
  AttrMap unit{{"min", 0.0}, {"max", 1.0}};
  if (!swish) return c.finish(OpId::clip, {shifted}, unit);
  CLEAVE_ASSIGN_OR_RETURN(std::string gate, c.apply(OpId::clip, {shifted}, unit));
  return c.finish(OpId::mul, {c.x(), gate});
}
Status convertHardSigmoid(OnnxImportContext& ctx, const onnx::NodeProto& node) { return hardGate(ctx, node, false); }
Status convertHardSwish(OnnxImportContext& ctx, const onnx::NodeProto& node) { return hardGate(ctx, node, true); }

Status convertSoftplus(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string e, c.apply(OpId::exp, {c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string one, c.filled(1, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, c.apply(OpId::add, {e, one}));
  return c.finish(OpId::log, {sum});
}

Status convertSoftsign(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string magnitude, c.absolute());
  CLEAVE_ASSIGN_OR_RETURN(std::string one, c.filled(1, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string denominator, c.apply(OpId::add, {magnitude, one}));
  return c.finish(OpId::div, {c.x(), denominator});
}

Status convertShrink(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  double lambd = floatAttr(node, "lambd", 0.5), bias_value = floatAttr(node, "bias", 0.0);
  CLEAVE_ASSIGN_OR_RETURN(std::string low, c.filled(-lambd, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string high, c.filled(lambd, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string bias, c.filled(bias_value, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string below, c.apply(OpId::less, {c.x(), low}));
  CLEAVE_ASSIGN_OR_RETURN(std::string above, c.apply(OpId::greater, {c.x(), high}));
  CLEAVE_ASSIGN_OR_RETURN(std::string raised, c.apply(OpId::add, {c.x(), bias}));
  CLEAVE_ASSIGN_OR_RETURN(std::string lowered, c.apply(OpId::sub, {c.x(), bias}));
  CLEAVE_ASSIGN_OR_RETURN(std::string upper, c.apply(OpId::where, {above, lowered, zero}));
  return c.finish(OpId::where, {below, raised, upper});
}

// x·sigmoid(alpha·x), as PyTorch's SiLU exports it (alpha 1 multiplies nothing).
Expected<std::string> swishOf(OnnxComposite& c, const std::string& x, double alpha) {
  std::string scaled = x;
  if (alpha != 1.0) {
    CLEAVE_ASSIGN_OR_RETURN(std::string factor, c.filled(alpha, c.dtype()));
    CLEAVE_ASSIGN_OR_RETURN(scaled, c.apply(OpId::mul, {x, factor}));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string gate, c.apply(OpId::sigmoid, {scaled}));
  return c.apply(OpId::mul, {x, gate});
}

// Swish (opset 24): x·sigmoid(alpha·x).
Status convertSwish(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string y, swishOf(c, c.x(), floatAttr(node, "alpha", 1.0)));
  return c.finish(OpId::identity, {y});
}

// SwiGLU (opset 28): Swish(A)·B, A and B of one shape (Llama's gate and up projections).
Status convertSwiGlu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(TensorType b_type, ctx.typeOf(node, node.input(1)));
  if (b_type != c.xType()) return c.fail("A and B must have one type and shape, got " + c.xType().str() + " and " + b_type.str());
  CLEAVE_ASSIGN_OR_RETURN(std::string gate, swishOf(c, c.x(), floatAttr(node, "alpha", 1.0)));
  return c.finish(OpId::mul, {gate, node.input(1)});
}

// Softmax and LogSoftmax (`op`) over `axis`. Before opset 13 (`coerced_to_2d`) the axis defaults
// to 1 and the input is coerced to 2-D at it: flatten, normalise rows, reshape back.
template <OpId op, bool coerced_to_2d>
Status convertSoftmaxLike(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  int64_t axis = intAttr(node, "axis", coerced_to_2d ? 1 : -1);
  int64_t normalized = normalizeAxis(axis, x.rank());
  if (normalized < 0) return ctx.nodeError(node, "axis " + std::to_string(axis) + " is out of range for " + x.str());
  if (!coerced_to_2d || normalized == x.rank() - 1) return ctx.emit(node, op, {node.input(0)}, {{"axis", axis}});
  CLEAVE_ASSIGN_OR_RETURN(ValueId input, ctx.valueOf(node, node.input(0)));
  CLEAVE_ASSIGN_OR_RETURN(auto flat,
                          ctx.emitValues(node, OpId::flatten, {input}, {{"axis", normalized}}, node.output(0) + ".2d"));
  CLEAVE_ASSIGN_OR_RETURN(auto normed, ctx.emitValues(node, op, flat, {{"axis", int64_t{-1}}}, node.output(0) + ".2d"));
  CLEAVE_ASSIGN_OR_RETURN(auto result, ctx.emitValues(node, OpId::reshape, normed, {{"shape", x.shape}}, node.output(0)));
  ctx.bindValue(node.output(0), result.front());
  return Status::ok();
}

// Gelu (opset 20): approximate "none" (with erf) or "tanh", as cleave's gelu op.
Status convertGelu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  std::string approximate = stringAttr(node, "approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return ctx.nodeError(node, "approximate must be \"none\" or \"tanh\", not \"" + approximate + "\"");
  return ctx.emit(node, OpId::gelu, {node.input(0)}, {{"approximate", approximate}});
}

constexpr OnnxConverter kActivationConverters[] = {
    {"Celu", convertCelu},
    {"Elu", convertElu},
    {"Gelu", convertGelu, 20},
    {"HardSigmoid", convertHardSigmoid},
    {"HardSwish", convertHardSwish},
    {"LeakyRelu", convertLeakyRelu},
    {"LogSoftmax", convertSoftmaxLike<OpId::log_softmax, true>, 11, 12},
    {"LogSoftmax", convertSoftmaxLike<OpId::log_softmax, false>, 13},
    {"PRelu", convertPRelu},
    {"Relu", convertOneToOne<OpId::relu>},
    {"Selu", convertSelu},
    {"Shrink", convertShrink},
    {"Sigmoid", convertOneToOne<OpId::sigmoid>},
    {"Softmax", convertSoftmaxLike<OpId::softmax, true>, 11, 12},
    {"Softmax", convertSoftmaxLike<OpId::softmax, false>, 13},
    {"Softplus", convertSoftplus},
    {"Softsign", convertSoftsign},
    {"SwiGLU", convertSwiGlu, 28},
    {"Swish", convertSwish, 24},
    {"Tanh", convertOneToOne<OpId::tanh>},
    {"ThresholdedRelu", convertThresholdedRelu},
};

}  // namespace

std::span<const OnnxConverter> activationConverters() { return kActivationConverters; }

}  // namespace cleave
