// Gradient ops: the backward kernels autodiff emits (relu_grad, conv2d_grad_input, ...).

#include "ir/op_table.h"
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

using Types = std::vector<TensorType>;

Status sameType(const OpContext& c, int a, int b) {
  if (c.operands[a] == c.operands[b]) return Status::ok();
  return Status::badInput(std::string(c.def.name) + ": operand " + std::to_string(b) + " is " +
                          c.operands[b].str() + ", it must match operand " + std::to_string(a) + " (" +
                          c.operands[a].str() + ")");
}

Status shapeAttr(const OpContext& c, const char* attr, Shape& out) {
  out = c.getInts(attr);
  for (int64_t d : out)
    if (d < 0) return Status::badInput(std::string(c.def.name) + ": attribute '" + attr + "' has a negative dim");
  return Status::ok();
}

// dy and a same-shaped forward tensor -> dx of that shape.
Expected<Types> elementwiseGradShape(const OpContext& c) {
  CLEAVE_TRY(requireFloat(c, 0));
  CLEAVE_TRY(sameType(c, 0, 1));
  return Types{c.operands[0]};
}

OpCost elementwiseGradCost(const OpContext& c) { return perElementCost(c, 4); }

// Every operand and result dimension is one pass-through factor, by position (same-shape ops).
ShardingRule sameShapeRule(const OpContext& c, int need_replication_axis = -1) {
  ShardingRule rule;
  const Shape& shape = c.results[0].shape;
  std::vector<int> dims;
  for (size_t d = 0; d < shape.size(); ++d)
    dims.push_back(rule.addFactor(shape[d], static_cast<int>(d) == need_replication_axis
                                                ? FactorKind::kNeedReplication
                                                : FactorKind::kPassThrough));
  for (size_t i = 0; i < c.operands.size(); ++i)
    rule.operand_dims.push_back(c.operands[i].shape == shape ? dims
                                                              : std::vector<int>(c.operands[i].shape.size(), -1));
  for (size_t i = 0; i < c.results.size(); ++i) rule.result_dims.push_back(dims);
  return rule;
}

ShardingRule elementwiseGradSharding(const OpContext& c) { return sameShapeRule(c); }

ShardingRule axisGradSharding(const OpContext& c) {
  return sameShapeRule(c, static_cast<int>(normalizeAxis(c.getInt("axis"), c.results[0].rank())));
}

Expected<Types> axisGradShape(const OpContext& c) {
  CLEAVE_TRY(requireFloat(c, 0));
  CLEAVE_TRY(sameType(c, 0, 1));
  if (normalizeAxis(c.getInt("axis"), c.operands[0].rank()) < 0)
    return Status::badInput(std::string(c.def.name) + ": axis " + std::to_string(c.getInt("axis")) +
                            " is out of range for " + c.operands[0].str());
  return Types{c.operands[0]};
}

Expected<Types> layerNormGradShape(const OpContext& c) {
  CLEAVE_TRY(requireFloat(c, 0));
  CLEAVE_TRY(sameType(c, 0, 1));
  int64_t axis = normalizeAxis(c.getInt("axis"), c.operands[1].rank());
  if (axis < 0) return Status::badInput("layer_norm_grad: axis is out of range for " + c.operands[1].str());
  Shape normalized(c.operands[1].shape.begin() + axis, c.operands[1].shape.end());
  if (c.operands[2].shape != normalized || c.operands[2].dtype != c.operands[1].dtype)
    return Status::badInput("layer_norm_grad: operand 2 (scale) is " + c.operands[2].str() + ", it must have shape " +
                            shapeStr(normalized));
  return Types{c.operands[1], c.operands[2], c.operands[2]};
}

OpCost layerNormGradCost(const OpContext& c) {
  OpCost cost = elementwiseGradCost(c);
  cost.flops = 12 * static_cast<double>(c.operands[1].numel());
  return cost;
}

ShardingRule layerNormGradSharding(const OpContext& c) {
  ShardingRule rule;
  const Shape& shape = c.operands[1].shape;
  int64_t axis = normalizeAxis(c.getInt("axis"), static_cast<int64_t>(shape.size()));
  std::vector<int> dims, scale_dims;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    // Leading dims are summed over for dscale/dbias; normalised dims need the whole row.
    int f = rule.addFactor(shape[d], d < axis ? FactorKind::kReduction : FactorKind::kNeedReplication);
    dims.push_back(f);
    if (d >= axis) scale_dims.push_back(f);
  }
  rule.operand_dims = {dims, dims, scale_dims};
  rule.result_dims = {dims, scale_dims, scale_dims};
  return rule;
}

// The gradient of a windowed or indexing op must see the result its forward op gives: runs the
// forward op's shape rule on `operands` with this node's attributes less `own_attr` (the gradient
// op's record of the forward operand's shape) and checks it against dy (operand 0).
Status checkForwardResult(const OpContext& c, OpId forward, std::vector<TensorType> operands, const char* own_attr) {
  AttrMap attrs = c.attrs;
  attrs.erase(own_attr);
  auto result = inferResultTypes(opDef(forward), operands, attrs);
  std::string name(c.def.name);
  if (!result) return result.status().withContext(name + ": ");
  if ((*result)[0].shape != c.operands[0].shape)
    return Status::badInput(name + ": operand 0 (dy) is " + c.operands[0].str() + ", " + std::string(opName(forward)) +
                            " gives " + (*result)[0].str());
  return Status::ok();
}

Expected<Types> convGradInputShape(const OpContext& c) {
  Shape x_shape;
  CLEAVE_TRY(shapeAttr(c, "input_shape", x_shape));
  TensorType x{c.operands[0].dtype, x_shape};
  CLEAVE_TRY(checkForwardResult(c, OpId::conv2d, {x, c.operands[1]}, "input_shape"));
  return Types{x};
}

Expected<Types> convGradWeightShape(const OpContext& c) {
  Shape w_shape;
  CLEAVE_TRY(shapeAttr(c, "weight_shape", w_shape));
  TensorType w{c.operands[0].dtype, w_shape};
  CLEAVE_TRY(checkForwardResult(c, OpId::conv2d, {c.operands[1], w}, "weight_shape"));
  return Types{w};
}

OpCost convGradCost(const OpContext& c) {
  // Same multiply-adds as the forward convolution: 2·N·O·Ho·Wo·(C/g)·kh·kw.
  const Shape& dy = c.operands[0].shape;
  const Shape& w = c.def.id == OpId::conv2d_grad_input ? c.operands[1].shape : c.results[0].shape;
  double flops = 2.0 * static_cast<double>(dy[0] * dy[1] * dy[2] * dy[3]) * static_cast<double>(w[1] * w[2] * w[3]);
  OpCost cost = elementwiseGradCost(c);
  cost.flops = flops;
  return cost;
}

ShardingRule convGradInputSharding(const OpContext& c) {
  // dy [N,O,Ho,Wo], w [O,Cg,kh,kw] -> dx [N,C,H,W]: N pass, O summed, C pass, spatial replicated.
  ShardingRule rule;
  const Shape& dy = c.operands[0].shape;
  const Shape& w = c.operands[1].shape;
  const Shape& x = c.results[0].shape;
  bool grouped = c.getInt("groups") != 1;
  int n = rule.addFactor(dy[0], FactorKind::kPassThrough);
  int o = rule.addFactor(dy[1], grouped ? FactorKind::kNeedReplication : FactorKind::kReduction);
  int ch = rule.addFactor(x[1], grouped ? FactorKind::kNeedReplication : FactorKind::kPassThrough);
  int ho = rule.addFactor(dy[2], FactorKind::kNeedReplication), wo = rule.addFactor(dy[3], FactorKind::kNeedReplication);
  int kh = rule.addFactor(w[2], FactorKind::kNeedReplication), kw = rule.addFactor(w[3], FactorKind::kNeedReplication);
  int h = rule.addFactor(x[2], FactorKind::kNeedReplication), wd = rule.addFactor(x[3], FactorKind::kNeedReplication);
  rule.operand_dims = {{n, o, ho, wo}, {o, grouped ? -1 : ch, kh, kw}};
  rule.result_dims = {{n, ch, h, wd}};
  return rule;
}

ShardingRule convGradWeightSharding(const OpContext& c) {
  // dy [N,O,Ho,Wo], x [N,C,H,W] -> dw [O,Cg,kh,kw]: N summed, O pass, C pass, spatial replicated.
  ShardingRule rule;
  const Shape& dy = c.operands[0].shape;
  const Shape& x = c.operands[1].shape;
  const Shape& w = c.results[0].shape;
  bool grouped = c.getInt("groups") != 1;
  int n = rule.addFactor(dy[0], FactorKind::kReduction);
  int o = rule.addFactor(dy[1], grouped ? FactorKind::kNeedReplication : FactorKind::kPassThrough);
  int ch = rule.addFactor(x[1], grouped ? FactorKind::kNeedReplication : FactorKind::kPassThrough);
  int ho = rule.addFactor(dy[2], FactorKind::kNeedReplication), wo = rule.addFactor(dy[3], FactorKind::kNeedReplication);
  int h = rule.addFactor(x[2], FactorKind::kNeedReplication), wd = rule.addFactor(x[3], FactorKind::kNeedReplication);
  int kh = rule.addFactor(w[2], FactorKind::kNeedReplication), kw = rule.addFactor(w[3], FactorKind::kNeedReplication);
  rule.operand_dims = {{n, o, ho, wo}, {n, ch, h, wd}};
  rule.result_dims = {{o, grouped ? -1 : ch, kh, kw}};
  return rule;
}

Expected<Types> maxPoolGradShape(const OpContext& c) {
  CLEAVE_TRY(checkForwardResult(c, OpId::max_pool2d, {c.operands[1]}, ""));
  if (c.operands[0].dtype != c.operands[1].dtype) return Status::badInput("max_pool2d_grad: dy and x dtypes differ");
  return Types{c.operands[1]};
}

Expected<Types> avgPoolGradShape(const OpContext& c) {
  Shape x_shape;
  CLEAVE_TRY(shapeAttr(c, "input_shape", x_shape));
  TensorType x{c.operands[0].dtype, x_shape};
  CLEAVE_TRY(checkForwardResult(c, OpId::avg_pool2d, {x}, "input_shape"));
  return Types{x};
}

OpCost poolGradCost(const OpContext& c) {
  OpCost cost = elementwiseGradCost(c);
  const auto& k = c.getInts("kernel");
  cost.flops = static_cast<double>(c.operands[0].numel()) * (k.size() == 2 ? static_cast<double>(k[0] * k[1]) : 1.0);
  return cost;
}

ShardingRule poolGradSharding(const OpContext& c) {
  ShardingRule rule;
  const Shape& dy = c.operands[0].shape;
  const Shape& x = c.results[0].shape;
  int n = rule.addFactor(x[0], FactorKind::kPassThrough), ch = rule.addFactor(x[1], FactorKind::kPassThrough);
  int ho = rule.addFactor(dy[2], FactorKind::kNeedReplication), wo = rule.addFactor(dy[3], FactorKind::kNeedReplication);
  int h = rule.addFactor(x[2], FactorKind::kNeedReplication), w = rule.addFactor(x[3], FactorKind::kNeedReplication);
  rule.operand_dims.push_back({n, ch, ho, wo});
  if (c.operands.size() > 1) rule.operand_dims.push_back({n, ch, h, w});
  rule.result_dims = {{n, ch, h, w}};
  return rule;
}

Expected<Types> gatherGradShape(const OpContext& c) {
  Shape data_shape;
  CLEAVE_TRY(shapeAttr(c, "data_shape", data_shape));
  TensorType data{c.operands[0].dtype, data_shape};
  CLEAVE_TRY(checkForwardResult(c, OpId::gather, {data, c.operands[1]}, "data_shape"));
  return Types{data};
}

ShardingRule gatherGradSharding(const OpContext& c) {
  // Index dims are summed over (scatter-add); data dims other than `axis` pass through.
  ShardingRule rule;
  const Shape& data = c.results[0].shape;
  const Shape& idx = c.operands[1].shape;
  int64_t axis = normalizeAxis(c.getInt("axis"), static_cast<int64_t>(data.size()));
  std::vector<int> data_dims, idx_dims, dy_dims;
  for (int64_t d : idx) idx_dims.push_back(rule.addFactor(d, FactorKind::kReduction));
  for (int64_t d = 0; d < static_cast<int64_t>(data.size()); ++d)
    data_dims.push_back(rule.addFactor(data[d], d == axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough));
  dy_dims.assign(data_dims.begin(), data_dims.begin() + axis);
  dy_dims.insert(dy_dims.end(), idx_dims.begin(), idx_dims.end());
  dy_dims.insert(dy_dims.end(), data_dims.begin() + axis + 1, data_dims.end());
  rule.operand_dims = {dy_dims, idx_dims};
  rule.result_dims = {data_dims};
  return rule;
}

Expected<Types> sliceGradShape(const OpContext& c) {
  Shape in;
  CLEAVE_TRY(shapeAttr(c, "input_shape", in));
  TensorType x{c.operands[0].dtype, in};
  CLEAVE_TRY(checkForwardResult(c, OpId::slice, {x}, "input_shape"));
  return Types{x};
}

ShardingRule sliceGradSharding(const OpContext& c) {
  ShardingRule rule;
  const Shape& dy = c.operands[0].shape;
  const Shape& in = c.results[0].shape;
  std::vector<int> dims;
  for (size_t d = 0; d < in.size(); ++d)
    dims.push_back(rule.addFactor(in[d], dy[d] == in[d] ? FactorKind::kPassThrough : FactorKind::kNeedReplication));
  rule.operand_dims = {dims};
  rule.result_dims = {dims};
  return rule;
}

Expected<Types> softmaxCrossEntropyGradShape(const OpContext& c) {
  const TensorType& dloss = c.operands[0];
  const TensorType& logits = c.operands[1];
  const TensorType& labels = c.operands[2];
  if (dloss.rank() != 0 || dloss.dtype != DType::kF32)
    return Status::badInput("softmax_cross_entropy_grad: operand 0 (dloss) must be f32[], got " + dloss.str());
  CLEAVE_TRY(requireFloat(c, 1));
  if (logits.rank() < 1) return Status::badInput("softmax_cross_entropy_grad: logits must have a class dim");
  if (labels.dtype != DType::kI64 && labels.dtype != DType::kI32)
    return Status::badInput("softmax_cross_entropy_grad: operand 2 (labels) must be i64 or i32, got " + labels.str());
  Shape lead(logits.shape.begin(), logits.shape.end() - 1);
  if (labels.shape != lead)
    return Status::badInput("softmax_cross_entropy_grad: labels " + labels.str() + " must have shape " + shapeStr(lead));
  return Types{logits};
}

ShardingRule softmaxCrossEntropyGradSharding(const OpContext& c) {
  ShardingRule rule;
  const Shape& logits = c.operands[1].shape;
  std::vector<int> dims;
  for (size_t d = 0; d < logits.size(); ++d)
    dims.push_back(rule.addFactor(logits[d], d + 1 == logits.size() ? FactorKind::kNeedReplication
                                                                    : FactorKind::kPassThrough));
  rule.operand_dims = {{}, dims, std::vector<int>(dims.begin(), dims.end() - 1)};
  rule.result_dims = {dims};
  return rule;
}


std::vector<AttrSpec> convAttrs(const char* shape_attr) {
  return {requiredAttr(shape_attr, AttrKind::kInts), optionalInts("strides", {1, 1}), optionalInts("pads", {0, 0, 0, 0}),
          optionalInts("dilations", {1, 1}), optionalInt("groups", 1)};
}

std::vector<AttrSpec> poolAttrs(bool avg) {
  std::vector<AttrSpec> attrs = {requiredAttr("kernel", AttrKind::kInts), optionalInts("strides", {}), optionalInts("pads", {0, 0, 0, 0}),
                                 optionalInt("ceil_mode", 0)};
  if (avg) {
    attrs.insert(attrs.begin(), requiredAttr("input_shape", AttrKind::kInts));
    attrs.push_back(optionalInt("count_include_pad", 0));
  }
  return attrs;
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

// conv2d_grad_input is also the transposed convolution (the ONNX importer's ConvTranspose): for
// y = Cᵀ(w)·u, du is the convolution of dy by w, and dw the weight gradient of that convolution
// with u in the role of its output gradient.
Status conv2dGradInputGradient(GradientContext& g) {
  ValueId u = g.operand(0), w = g.operand(1);
  AttrMap conv_attrs = copyAttrs(g, {"strides", "pads", "dilations", "groups"});
  AttrMap weight_attrs = conv_attrs;
  weight_attrs.emplace("weight_shape", shapeOf(g, w));
  g.operand_grads[0] = g.emit(OpId::conv2d, {dy(g), w}, std::move(conv_attrs));
  g.operand_grads[1] = g.emit(OpId::conv2d_grad_weight, {u, dy(g)}, std::move(weight_attrs));
  return g.status;
}

}  // namespace

void addGradientOps(std::vector<OpDef>& table) {
  auto elementwise = [&](OpId id, std::string_view name, std::string_view summary, std::vector<AttrSpec> attrs = {}) {
    table.push_back(OpDef{id, name, summary, 2, 2, std::move(attrs), elementwiseGradShape, elementwiseGradCost,
                          elementwiseGradSharding});
  };
  elementwise(OpId::relu_grad, "relu_grad", "dy where x > 0, else 0");
  elementwise(OpId::gelu_grad, "gelu_grad", "dy times the derivative of gelu at x",
              {optionalString("approximate", "none")});
  elementwise(OpId::tanh_grad, "tanh_grad", "dy * (1 - y^2) from tanh's result y");
  elementwise(OpId::sigmoid_grad, "sigmoid_grad", "dy * y * (1 - y) from sigmoid's result y");
  table.push_back(OpDef{OpId::softmax_grad, "softmax_grad", "y * (dy - sum(dy * y)) along axis", 2, 2,
                        {optionalInt("axis", -1)}, axisGradShape, elementwiseGradCost, axisGradSharding});
  table.push_back(OpDef{OpId::log_softmax_grad, "log_softmax_grad", "dy - exp(y) * sum(dy) along axis", 2, 2,
                        {optionalInt("axis", -1)}, axisGradShape, elementwiseGradCost, axisGradSharding});
  table.push_back(OpDef{OpId::layer_norm_grad, "layer_norm_grad", "gradients of layer_norm: dx, dscale, dbias", 3, 3,
                        {optionalInt("axis", -1), optionalFloat("epsilon", 1e-5)}, layerNormGradShape, layerNormGradCost,
                        layerNormGradSharding});
  table.push_back(OpDef{OpId::conv2d_grad_input, "conv2d_grad_input", "gradient of conv2d with respect to its input",
                        2, 2, convAttrs("input_shape"), convGradInputShape, convGradCost, convGradInputSharding});
  table.push_back(OpDef{OpId::conv2d_grad_weight, "conv2d_grad_weight",
                        "gradient of conv2d with respect to its weight", 2, 2, convAttrs("weight_shape"),
                        convGradWeightShape, convGradCost, convGradWeightSharding});
  table.push_back(OpDef{OpId::max_pool2d_grad, "max_pool2d_grad", "routes dy to each window's first maximum", 2, 2,
                        poolAttrs(false), maxPoolGradShape, poolGradCost, poolGradSharding});
  table.push_back(OpDef{OpId::avg_pool2d_grad, "avg_pool2d_grad", "spreads dy evenly over each window", 1, 1,
                        poolAttrs(true), avgPoolGradShape, poolGradCost, poolGradSharding});
  table.push_back(OpDef{OpId::gather_grad, "gather_grad", "scatter-adds dy into zeros of the gathered data's shape",
                        2, 2, {requiredAttr("data_shape", AttrKind::kInts), optionalInt("axis", 0)}, gatherGradShape,
                        elementwiseGradCost, gatherGradSharding});
  table.push_back(OpDef{OpId::slice_grad, "slice_grad", "places dy where slice read, zeros elsewhere", 1, 1,
                        {requiredAttr("input_shape", AttrKind::kInts), requiredAttr("starts", AttrKind::kInts), requiredAttr("ends", AttrKind::kInts),
                         optionalInts("axes", {}), optionalInts("steps", {})},
                        sliceGradShape, elementwiseGradCost, sliceGradSharding});
  table.push_back(OpDef{OpId::softmax_cross_entropy_grad, "softmax_cross_entropy_grad",
                        "dloss * (softmax(logits) - onehot(labels)) / count", 3, 3, {optionalInt("ignore_index", -100)},
                        softmaxCrossEntropyGradShape, elementwiseGradCost, softmaxCrossEntropyGradSharding});

  // Gradient rules.
  appendedDef(table, OpId::conv2d_grad_input).gradient = conv2dGradInputGradient;
}

}  // namespace cleave::ops
