// ONNX converters of reductions: ReduceSum, ReduceMean, ReduceMax and the ones composed of them (ReduceL2, ...).
#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// keepdims and the axes attribute (absent: every axis), as the cleave reduce ops take them.
AttrMap reduceAttrs(const onnx::NodeProto& node) {
  AttrMap attrs{{"keepdims", intAttr(node, "keepdims", 1)}};
  if (auto axes = intsAttr(node, "axes")) attrs["axes"] = *axes;
  return attrs;
}

// A reduction whose axes are an attribute (ReduceSum before opset 13, the others before opset 18).
template <OpId op>
Status convertReduce(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, op, {node.input(0)}, reduceAttrs(node));
}

// ReduceSum from opset 13: the axes are an optional constant input; none means every axis, or
// with noop_with_empty_axes=1 none: the identity.
Status convertReduceSum13(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs{{"keepdims", intAttr(node, "keepdims", 1)}};
  std::vector<int64_t> axes;
  if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(axes, ctx.constantInts(node, 1));
  }
  if (axes.empty() && intAttr(node, "noop_with_empty_axes", 0) != 0)
    return ctx.emit(node, OpId::identity, {node.input(0)}, {});
  attrs["axes"] = axes;
  return ctx.emit(node, OpId::reduce_sum, {node.input(0)}, attrs);
}

// ReduceMin is -reduce_max(-x).
Status convertReduceMin(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string negated, c.apply(OpId::neg, {c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string largest, c.apply(OpId::reduce_max, {negated}, reduceAttrs(node)));
  return c.finish(OpId::neg, {largest});
}

Status convertReduceL1(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string magnitude, c.absolute());
  return c.finish(OpId::reduce_sum, {magnitude}, reduceAttrs(node));
}

Status convertReduceSumSquare(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {c.x(), c.x()}));
  return c.finish(OpId::reduce_sum, {squared}, reduceAttrs(node));
}

Status convertReduceL2(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {c.x(), c.x()}));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, c.apply(OpId::reduce_sum, {squared}, reduceAttrs(node)));
  return c.finish(OpId::sqrt, {sum});
}

Status convertReduceLogSum(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, c.apply(OpId::reduce_sum, {c.x()}, reduceAttrs(node)));
  return c.finish(OpId::log, {sum});
}

// Shifted by the maximum: log(sum(exp(x - max))) + max.
Status convertReduceLogSumExp(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  AttrMap reduce = reduceAttrs(node), kept = reduce;
  kept["keepdims"] = int64_t{1};
  CLEAVE_ASSIGN_OR_RETURN(std::string kept_max, c.apply(OpId::reduce_max, {c.x()}, kept));
  CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::sub, {c.x(), kept_max}));
  CLEAVE_ASSIGN_OR_RETURN(std::string e, c.apply(OpId::exp, {shifted}));
  CLEAVE_ASSIGN_OR_RETURN(std::string sum, c.apply(OpId::reduce_sum, {e}, reduce));
  CLEAVE_ASSIGN_OR_RETURN(std::string log_sum, c.apply(OpId::log, {sum}));
  CLEAVE_ASSIGN_OR_RETURN(std::string max, c.apply(OpId::reduce_max, {c.x()}, reduce));
  return c.finish(OpId::add, {log_sum, max});
}

constexpr OnnxConverter kReductionConverters[] = {
    {"ReduceL1", convertReduceL1},
    {"ReduceL2", convertReduceL2},
    {"ReduceLogSum", convertReduceLogSum},
    {"ReduceLogSumExp", convertReduceLogSumExp},
    {"ReduceMax", convertReduce<OpId::reduce_max>},
    {"ReduceMean", convertReduce<OpId::reduce_mean>},
    {"ReduceMin", convertReduceMin},
    {"ReduceSum", convertReduce<OpId::reduce_sum>, 11, 12},
    {"ReduceSum", convertReduceSum13, 13},
    {"ReduceSumSquare", convertReduceSumSquare},
};

}  // namespace

std::span<const OnnxConverter> reductionConverters() { return kReductionConverters; }

}  // namespace cleave
