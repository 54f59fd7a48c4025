// ONNX converters of reductions: ReduceSum, ReduceMean, ReduceMax and the ones composed of them (ReduceL2, ...).
#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// What a Reduce* node reduces: the cleave reduce op's attributes (keepdims, axes), or nothing at
// all (`noop`: noop_with_empty_axes=1 with no axes given; the reduction is the identity).
struct ReduceSpec {
  AttrMap attrs;
  bool noop = false;
};

// The axes are an attribute before opset 18 (ReduceSum: 13), then an optional constant input; no
// axes means every axis, unless noop_with_empty_axes=1.
Expected<ReduceSpec> reduceSpec(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  ReduceSpec spec;
  spec.attrs["keepdims"] = intAttr(node, "keepdims", 1);
  const bool axes_as_input = ctx.opset() >= (node.op_type() == "ReduceSum" ? 13 : 18);
  std::vector<int64_t> axes;
  if (!axes_as_input) {
    if (auto attr = intsAttr(node, "axes")) axes = *attr;
  } else if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(axes, ctx.constantInts(node, 1));
  }
  spec.noop = axes_as_input && axes.empty() && intAttr(node, "noop_with_empty_axes", 0) != 0;
  if (!axes.empty()) spec.attrs["axes"] = axes;
  return spec;
}

// A step of a composite that reduces with `op` as `spec` says (the identity when it is a no-op).
Expected<std::string> reduceStep(OnnxComposite& c, OpId op, const std::string& input, const ReduceSpec& spec) {
  return spec.noop ? c.apply(OpId::identity, {input}) : c.apply(op, {input}, spec.attrs);
}

// Bool ReduceMax and ReduceMin (opset 20: any and all) through i32 and back.
Status boolExtremum(OnnxImportContext& ctx, const onnx::NodeProto& node, const ReduceSpec& spec, bool minimum) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string wide, c.apply(OpId::cast, {c.x()}, {{"to", std::string("i32")}}));
  if (minimum) {
    CLEAVE_ASSIGN_OR_RETURN(wide, c.apply(OpId::neg, {wide}));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string reduced, reduceStep(c, OpId::reduce_max, wide, spec));
  if (minimum) {
    CLEAVE_ASSIGN_OR_RETURN(reduced, c.apply(OpId::neg, {reduced}));
  }
  return c.finish(OpId::cast, {reduced}, {{"to", std::string("bool")}});
}

// A reduction that is one cleave op.
template <OpId op>
Status convertReduce(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  if (op == OpId::reduce_max && x.dtype == DType::kBool) return boolExtremum(ctx, node, spec, false);
  if (spec.noop) return ctx.emit(node, OpId::identity, {node.input(0)}, {});
  return ctx.emit(node, op, {node.input(0)}, spec.attrs);
}

// ReduceMin is -reduce_max(-x).
Status convertReduceMin(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  if (x.dtype == DType::kBool) return boolExtremum(ctx, node, spec, true);
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string negated, c.apply(OpId::neg, {c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string largest, reduceStep(c, OpId::reduce_max, negated, spec));
  return c.finish(OpId::neg, {largest});
}

Status convertReduceL1(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string magnitude, c.absolute());
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, reduceStep(c, OpId::reduce_sum, magnitude, spec));
  return c.finish(OpId::identity, {sum});
}

Status convertReduceSumSquare(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {c.x(), c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, reduceStep(c, OpId::reduce_sum, squared, spec));
  return c.finish(OpId::identity, {sum});
}

Status convertReduceL2(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {c.x(), c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, reduceStep(c, OpId::reduce_sum, squared, spec));
  return c.finish(OpId::sqrt, {sum});
}

Status convertReduceLogSum(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, reduceStep(c, OpId::reduce_sum, c.x(), spec));
  return c.finish(OpId::log, {sum});
}

// Shifted by the maximum: log(sum(exp(x - max))) + max.
Status convertReduceLogSumExp(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(ReduceSpec spec, reduceSpec(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  ReduceSpec kept = spec;
  kept.attrs["keepdims"] = int64_t{1};
  CLEAVE_ASSIGN_OR_RETURN(std::string kept_max, reduceStep(c, OpId::reduce_max, c.x(), kept));
  CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::sub, {c.x(), kept_max}));
  CLEAVE_ASSIGN_OR_RETURN(std::string e, c.apply(OpId::exp, {shifted}));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, reduceStep(c, OpId::reduce_sum, e, spec));
  CLEAVE_ASSIGN_OR_RETURN(std::string log_sum, c.apply(OpId::log, {sum}));
  CLEAVE_ASSIGN_OR_RETURN(std::string max, reduceStep(c, OpId::reduce_max, c.x(), spec));
  return c.finish(OpId::add, {log_sum, max});
}

// ArgMax, and ArgMin as argmax(-x) (integer minima wrap: the one int64 value -x cannot hold).
template <bool minimum>
Status convertArgExtremum(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs{{"axis", intAttr(node, "axis", 0)}, {"keepdims", intAttr(node, "keepdims", 1)},
                {"select_last_index", intAttr(node, "select_last_index", 0)}};
  if (!minimum) return ctx.emit(node, OpId::argmax, {node.input(0)}, attrs);
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string negated, c.apply(OpId::neg, {c.x()}));
  return c.finish(OpId::argmax, {negated}, attrs);
}

// CumSum: the axis is a constant input (a scalar).
Status convertCumSum(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto axis, ctx.constantInts(node, 1));
  if (axis.size() != 1) return ctx.nodeError(node, "axis must hold one integer");
  return ctx.emit(node, OpId::cumsum, {node.input(0)},
                  {{"axis", axis[0]}, {"exclusive", intAttr(node, "exclusive", 0)}, {"reverse", intAttr(node, "reverse", 0)}});
}

constexpr OnnxConverter kReductionConverters[] = {
    {"ArgMax", convertArgExtremum<false>},
    {"ArgMin", convertArgExtremum<true>},
    {"CumSum", convertCumSum},
    {"ReduceL1", convertReduceL1},
    {"ReduceL2", convertReduceL2},
    {"ReduceLogSum", convertReduceLogSum},
    {"ReduceLogSumExp", convertReduceLogSumExp},
    {"ReduceMax", convertReduce<OpId::reduce_max>},
    {"ReduceMean", convertReduce<OpId::reduce_mean>},
    {"ReduceMin", convertReduceMin},
    {"ReduceSum", convertReduce<OpId::reduce_sum>},
    {"ReduceSumSquare", convertReduceSumSquare},
};

}  // namespace

std::span<const OnnxConverter> reductionConverters() { return kReductionConverters; }

}  // namespace cleave
