// Gradient ops: the backward kernels autodiff emits (relu_grad, conv2d_grad_input, ...).

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/op_table.h"
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"
#include "ir/ops/resize_coordinates.h"

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
// gelu's derivative evaluates erf and exp (or tanh) per element: two transcendental functions.
OpCost geluGradCost(const OpContext& c) { return perElementCost(c, 16); }

// Every operand and result dimension is one pass-through factor, by position (same-shape ops).
ShardingRule sameShapeRule(const OpContext& c, int need_replication_axis = -1) {
  ShardingRuleBuilder rule(c.operands, c.results);
  rule.addPointwise(c.results[0].shape, [&](int d) {
    return d == need_replication_axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough;
  });
  return rule.build();
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
  if (axis < 0) return Status::badInput(std::string(c.def.name) + ": axis is out of range for " + c.operands[1].str());
  Shape normalized(c.operands[1].shape.begin() + axis, c.operands[1].shape.end());
  if (c.operands[2].shape != normalized || c.operands[2].dtype != c.operands[1].dtype)
    return Status::badInput(std::string(c.def.name) + ": operand 2 (scale) is " + c.operands[2].str() + ", it must have shape " +
                            shapeStr(normalized));
  return Types{c.operands[1], c.operands[2], c.operands[2]};
}

// rms_norm_grad(dy, x, scale) -> dx, dscale.
Expected<Types> rmsNormGradShape(const OpContext& c) {
  CLEAVE_ASSIGN_OR_RETURN(Types types, layerNormGradShape(c));
  types.pop_back();
  return types;
}

OpCost layerNormGradCost(const OpContext& c) {
  OpCost cost = elementwiseGradCost(c);
  cost.flops = 12 * static_cast<double>(c.operands[1].numel());
  return cost;
}

// layer_norm_grad's and rms_norm_grad's (whose results are dx and dscale).
ShardingRule layerNormGradSharding(const OpContext& c) {
  int64_t axis = normalizeAxis(c.getInt("axis"), c.operands[1].rank());
  ShardingRuleBuilder rule(c.operands, c.results);
  // Leading dims are summed over for dscale/dbias; normalised dims (scale's) need the whole row.
  rule.addBroadcastingPointwise(c.operands[1].shape, [&](int d) {
    return d < axis ? FactorKind::kReduction : FactorKind::kNeedReplication;
  });
  return rule.build();
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
  constexpr int kNoDim = ShardingRuleBuilder::kNoDim;
  constexpr FactorKind kReplicated = FactorKind::kNeedReplication;
  bool grouped = c.getInt("groups") != 1;
  ShardingRuleBuilder rule(c.operands, c.results);
  rule.addFactor({0}, {0});                                                    // N
  rule.addFactor({1, 0}, {}, grouped ? kReplicated : FactorKind::kReduction);  // O
  rule.addFactor({kNoDim, grouped ? kNoDim : 1}, {1}, grouped ? kReplicated : FactorKind::kPassThrough);  // C
  rule.addFactor({2}, {}, kReplicated);          // Ho
  rule.addFactor({3}, {}, kReplicated);          // Wo
  rule.addFactor({kNoDim, 2}, {}, kReplicated);  // kh
  rule.addFactor({kNoDim, 3}, {}, kReplicated);  // kw
  rule.addFactor({}, {2}, kReplicated);          // H
  rule.addFactor({}, {3}, kReplicated);          // W
  return rule.build();
}

ShardingRule convGradWeightSharding(const OpContext& c) {
  // dy [N,O,Ho,Wo], x [N,C,H,W] -> dw [O,Cg,kh,kw]: N summed, O pass, C pass, spatial replicated.
  constexpr int kNoDim = ShardingRuleBuilder::kNoDim;
  constexpr FactorKind kReplicated = FactorKind::kNeedReplication;
  bool grouped = c.getInt("groups") != 1;
  FactorKind channels = grouped ? kReplicated : FactorKind::kPassThrough;
  ShardingRuleBuilder rule(c.operands, c.results);
  rule.addFactor({0, 0}, {}, FactorKind::kReduction);                  // N
  rule.addFactor({1}, {0}, channels);                                  // O
  rule.addFactor({kNoDim, 1}, {grouped ? kNoDim : 1}, channels);       // C
  rule.addFactor({2}, {}, kReplicated);          // Ho
  rule.addFactor({3}, {}, kReplicated);          // Wo
  rule.addFactor({kNoDim, 2}, {}, kReplicated);  // H
  rule.addFactor({kNoDim, 3}, {}, kReplicated);  // W
  rule.addFactor({}, {2}, kReplicated);          // kh
  rule.addFactor({}, {3}, kReplicated);          // kw
  return rule.build();
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
  // dy [N,C,Ho,Wo], x [N,C,H,W] when present (max_pool2d_grad) -> dx [N,C,H,W].
  constexpr int kNoDim = ShardingRuleBuilder::kNoDim;
  constexpr FactorKind kReplicated = FactorKind::kNeedReplication;
  ShardingRuleBuilder rule(c.operands, c.results);
  rule.addFactor({0, 0}, {0});                        // N
  rule.addFactor({1, 1}, {1});                        // C
  rule.addFactor({2}, {}, kReplicated);               // Ho
  rule.addFactor({3}, {}, kReplicated);               // Wo
  rule.addFactor({kNoDim, 2}, {2}, kReplicated);      // H
  rule.addFactor({kNoDim, 3}, {3}, kReplicated);      // W
  return rule.build();
}

// gather_grad, gather_elements_grad, gather_nd_grad: zeros of data_shape, where dy must be what the
// forward gather gives for data of that shape and these indices.
template <OpId kForward>
Expected<Types> gatherLikeGradShape(const OpContext& c) {
  Shape data_shape;
  CLEAVE_TRY(shapeAttr(c, "data_shape", data_shape));
  TensorType data{c.operands[0].dtype, data_shape};
  CLEAVE_TRY(checkForwardResult(c, kForward, {data, c.operands[1]}, "data_shape"));
  return Types{data};
}

// dy's and the indices' dims are summed over (scatter-add) and dx is replicated, but along a dim
// other than the axis where data and the indices have one size (gather_elements' shared dims):
// there element i of dy goes to element i of dx.
ShardingRule gatherElementsGradSharding(const OpContext& c) {
  ShardingRuleBuilder rule(c.operands, c.results);
  const int rank = static_cast<int>(c.results[0].rank());
  const int axis = static_cast<int>(normalizeAxis(c.getInt("axis"), rank));
  for (int d = 0; d < rank; ++d) {
    if (d != axis && c.results[0].shape[d] == c.operands[1].shape[d]) {
      rule.addFactor({d, d}, {d});
    } else {
      rule.addFactor({d, d}, {}, FactorKind::kReduction);
      rule.addResultFactor(0, d, FactorKind::kNeedReplication);
    }
  }
  return rule.build();
}

// dy's leading dims (the index tuples) are summed over; dx is replicated.
ShardingRule gatherNdGradSharding(const OpContext& c) {
  ShardingRuleBuilder rule(c.operands, c.results);
  const int index_rank = static_cast<int>(c.operands[1].rank());
  for (int d = 0; d < index_rank - 1; ++d) rule.addFactor({d, d}, {}, FactorKind::kReduction);
  for (int d = index_rank - 1; d < static_cast<int>(c.operands[0].rank()); ++d)
    rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
  rule.addOperandFactor(1, index_rank - 1, FactorKind::kNeedReplication);
  for (int d = 0; d < static_cast<int>(c.results[0].rank()); ++d) rule.addResultFactor(0, d, FactorKind::kNeedReplication);
  return rule.build();
}

// resize_grad: dy's type is the forward result for an input of input_shape.
Expected<Types> resizeGradShape(const OpContext& c) {
  Shape input_shape;
  CLEAVE_TRY(shapeAttr(c, "input_shape", input_shape));
  TensorType x{c.operands[0].dtype, input_shape};
  AttrMap forward = c.attrs;
  forward.erase("input_shape");
  forward["sizes"] = c.operands[0].shape;
  const std::vector<TensorType> operands = {x};
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> result, inferResultTypes(opDef(OpId::resize), operands, forward));
  if (result[0] != c.operands[0])
    return Status::badInput("resize_grad: operand 0 is " + c.operands[0].str() + ", resize gives " + result[0].str());
  return Types{x};
}

// Every dx element may gather from any dy element of the resized dims: replicated.
ShardingRule resizeGradSharding(const OpContext& c) {
  ShardingRuleBuilder rule(c.operands, c.results);
  for (int d = 0; d < static_cast<int>(c.results[0].rank()); ++d) {
    rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
    rule.addResultFactor(0, d, FactorKind::kNeedReplication);
  }
  return rule.build();
}

ShardingRule gatherGradSharding(const OpContext& c) {
  // Index dims are summed over (scatter-add); data dims other than `axis` pass through.
  const int data_rank = static_cast<int>(c.results[0].rank()), index_rank = static_cast<int>(c.operands[1].rank());
  const int axis = static_cast<int>(normalizeAxis(c.getInt("axis"), data_rank));
  ShardingRuleBuilder rule(c.operands, c.results);
  for (int d = 0; d < index_rank; ++d) rule.addFactor({axis + d, d}, {}, FactorKind::kReduction);
  for (int d = 0; d < data_rank; ++d) {
    if (d == axis) rule.addResultFactor(0, d, FactorKind::kNeedReplication);
    else rule.addFactor({d < axis ? d : d + index_rank - 1}, {d});
  }
  return rule.build();
}

Expected<Types> sliceGradShape(const OpContext& c) {
  Shape in;
  CLEAVE_TRY(shapeAttr(c, "input_shape", in));
  TensorType x{c.operands[0].dtype, in};
  CLEAVE_TRY(checkForwardResult(c, OpId::slice, {x}, "input_shape"));
  return Types{x};
}

ShardingRule sliceGradSharding(const OpContext& c) {
  const Shape& dy = c.operands[0].shape;
  const Shape& in = c.results[0].shape;
  ShardingRuleBuilder rule(c.operands, c.results);
  // A dim slice_grad keeps whole passes through; a sliced dim has dy's size on one side and the
  // input's on the other: a factor of each size, neither splittable.
  for (int d = 0; d < static_cast<int>(in.size()); ++d) {
    if (dy[d] == in[d]) {
      rule.addFactor({d}, {d});
    } else {
      rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
      rule.addResultFactor(0, d, FactorKind::kNeedReplication);
    }
  }
  return rule.build();
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
  // dloss [], logits [..., classes], labels [...] -> dlogits: the class dim needs a whole row.
  const int rank = static_cast<int>(c.operands[1].rank());
  ShardingRuleBuilder rule(c.operands, c.results);
  for (int d = 0; d + 1 < rank; ++d) rule.addFactor({ShardingRuleBuilder::kNoDim, d, d}, {d});
  rule.addFactor({ShardingRuleBuilder::kNoDim, rank - 1}, {rank - 1}, FactorKind::kNeedReplication);
  return rule.build();
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

// ---- Reference computations (double precision, naive loops) ----

using References = Expected<std::vector<TensorData>>;
using Operands = std::span<const TensorData* const>;

// dx = fn(dy, v) elementwise, v being the forward op's input or result (operand 1).
template <class Fn>
References mapGradientReference(const OpContext& c, Operands operands, Fn fn) {
  const std::vector<double> dy = referenceValues(*operands[0]), v = referenceValues(*operands[1]);
  std::vector<double> dx(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) dx[i] = fn(dy[i], v[i]);
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

References reluGradReference(const OpContext& c, Operands operands) {
  return mapGradientReference(c, operands, [](double dy, double x) { return x > 0 ? dy : 0.0; });
}

// gelu'(x) = Φ(x) + x·φ(x), or the derivative of the tanh approximation.
References geluGradReference(const OpContext& c, Operands operands) {
  if (c.getString("approximate") == "tanh")
    return mapGradientReference(c, operands, [](double dy, double x) {
      const double beta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, kappa = 0.044715;
      const double t = std::tanh(beta * (x + kappa * x * x * x));
      return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * beta * (1 + 3 * kappa * x * x));
    });
  return mapGradientReference(c, operands, [](double dy, double x) {
    const double cdf = 0.5 * (1 + std::erf(x / std::numbers::sqrt2));
    const double pdf = std::exp(-0.5 * x * x) * std::numbers::inv_sqrtpi / std::numbers::sqrt2;
    return dy * (cdf + x * pdf);
  });
}

References tanhGradReference(const OpContext& c, Operands operands) {
  return mapGradientReference(c, operands, [](double dy, double y) { return dy * (1 - y * y); });
}

References sigmoidGradReference(const OpContext& c, Operands operands) {
  return mapGradientReference(c, operands, [](double dy, double y) { return dy * (1 - y) * y; });
}

// softmax: dx = y·(dy − Σ dy·y); log_softmax: dx = dy − exp(y)·Σ dy (sums along the axis).
template <bool kLog>
References softmaxGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), y = referenceValues(*operands[1]);
  const AxisSplit s = splitAroundAxis(c.operands[0].shape, normalizeAxis(c.getInt("axis"), c.operands[0].rank()));
  std::vector<double> dx(dy.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t l) { return (o * s.length + l) * s.inner + i; };
      double sum = 0;
      for (int64_t l = 0; l < s.length; ++l) sum += kLog ? dy[at(l)] : dy[at(l)] * y[at(l)];
      for (int64_t l = 0; l < s.length; ++l)
        dx[at(l)] = kLog ? dy[at(l)] - std::exp(y[at(l)]) * sum : y[at(l)] * (dy[at(l)] - sum);
    }
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// With x̂ = (x − mean)·rstd and g = dy·scale per row: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),
// dscale = Σ_rows dy·x̂, dbias = Σ_rows dy.
References layerNormGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), x = referenceValues(*operands[1]);
  const std::vector<double> scale = referenceValues(*operands[2]);
  const double epsilon = c.getFloat("epsilon");
  const int64_t cols = static_cast<int64_t>(scale.size()), rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  std::vector<double> dx(x.size()), dscale(scale.size(), 0.0), dbias(scale.size(), 0.0), xhat(scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double mean = 0, var = 0, g_mean = 0, g_xhat_mean = 0;
    for (int64_t i = 0; i < cols; ++i) mean += xr[i] / static_cast<double>(cols);
    for (int64_t i = 0; i < cols; ++i) var += (xr[i] - mean) * (xr[i] - mean) / static_cast<double>(cols);
    const double rstd = 1 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < cols; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      dscale[i] += dyr[i] * xhat[i];
      dbias[i] += dyr[i];
      g_mean += dyr[i] * scale[i] / static_cast<double>(cols);
      g_xhat_mean += dyr[i] * scale[i] * xhat[i] / static_cast<double>(cols);
    }
    for (int64_t i = 0; i < cols; ++i) dx[r * cols + i] = rstd * (dyr[i] * scale[i] - g_mean - xhat[i] * g_xhat_mean);
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], dx), referenceTensor(c.results[1], dscale),
                                 referenceTensor(c.results[2], dbias)};
}

// With rstd = 1/sqrt(mean(x²) + epsilon), x̂ = x·rstd and g = dy·scale per row:
// dx = rstd·(g − x̂·mean(g·x̂)), dscale = Σ_rows dy·x̂.
References rmsNormGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), x = referenceValues(*operands[1]);
  const std::vector<double> scale = referenceValues(*operands[2]);
  const double epsilon = c.getFloat("epsilon");
  const int64_t cols = static_cast<int64_t>(scale.size()), rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  std::vector<double> dx(x.size()), dscale(scale.size(), 0.0), xhat(scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double squares = 0, g_xhat_mean = 0;
    for (int64_t i = 0; i < cols; ++i) squares += xr[i] * xr[i];
    const double rstd = 1 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
    for (int64_t i = 0; i < cols; ++i) {
      xhat[i] = xr[i] * rstd;
      dscale[i] += dyr[i] * xhat[i];
      g_xhat_mean += dyr[i] * scale[i] * xhat[i] / static_cast<double>(cols);
    }
    for (int64_t i = 0; i < cols; ++i) dx[r * cols + i] = rstd * (dyr[i] * scale[i] - xhat[i] * g_xhat_mean);
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], dx), referenceTensor(c.results[1], dscale)};
}

// The adjoints of conv2d's multiply-adds: dx[x] += dy[y]·w[w] and dw[w] += dy[y]·x[x].
References convGradInputReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), w = referenceValues(*operands[1]);
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  forEachConvTap(c.results[0].shape, c.operands[1].shape, c.operands[0].shape, c,
                 [&](int64_t yi, int64_t xi, int64_t wi) { dx[xi] += dy[yi] * w[wi]; });
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

References convGradWeightReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), x = referenceValues(*operands[1]);
  std::vector<double> dw(static_cast<size_t>(c.results[0].numel()), 0.0);
  forEachConvTap(c.operands[1].shape, c.results[0].shape, c.operands[0].shape, c,
                 [&](int64_t yi, int64_t xi, int64_t wi) { dw[wi] += dy[yi] * x[xi]; });
  return std::vector<TensorData>{referenceTensor(c.results[0], dw)};
}

// Each window's dy goes to its maximum (the first strict one, or the last NaN).
References maxPoolGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), x = referenceValues(*operands[1]);
  std::vector<double> dx(x.size(), 0.0);
  forEachPoolWindow(c.operands[1].shape, c.operands[0].shape, c, [&](int64_t yi, const PoolWindow& p) {
    const int64_t argmax = poolWindowArgmax(x, p);
    if (argmax >= 0) dx[argmax] += dy[yi];
  });
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// Each window's dy is spread evenly over the window's elements inside the image.
References avgPoolGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]);
  const bool count_include_pad = c.getInt("count_include_pad") == 1;
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  forEachPoolWindow(c.results[0].shape, c.operands[0].shape, c, [&](int64_t yi, const PoolWindow& p) {
    const int64_t inside = (p.h_last - p.h_first) * (p.w_last - p.w_first);
    const double share = dy[yi] / static_cast<double>(count_include_pad ? p.padded_count : inside);
    for (int64_t ih = p.h_first; ih < p.h_last; ++ih)
      for (int64_t iw = p.w_first; iw < p.w_last; ++iw) dx[p.plane + ih * p.width + iw] += share;
  });
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// dx = zeros of data_shape; dx[o, indices[j], k] += dy[o, j, k]; negative indices count from the end.
References gatherGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]), indices = referenceValues(*operands[1]);
  const Shape& data = c.results[0].shape;
  const AxisSplit s = splitAroundAxis(data, normalizeAxis(c.getInt("axis"), static_cast<int64_t>(data.size())));
  const int64_t count = static_cast<int64_t>(indices.size());
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  for (int64_t j = 0; j < count; ++j) {
    int64_t index = static_cast<int64_t>(indices[j]);
    if (index < -s.length || index >= s.length)
      return Status::badInput("gather_grad: index " + std::to_string(index) + " (element " + std::to_string(j) +
                              " of the indices) is out of range");
    if (index < 0) index += s.length;
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t k = 0; k < s.inner; ++k) dx[(o * s.length + index) * s.inner + k] += dy[(o * count + j) * s.inner + k];
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// dx = zeros of data_shape; dx[i with its axis coordinate replaced by indices[i]] += dy[i].
References gatherElementsGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]);
  const Shape& data = c.results[0].shape;
  auto targets = gatherElementsSources(data, *operands[1], normalizeAxis(c.getInt("axis"), static_cast<int64_t>(data.size())));
  if (!targets) return Status::badInput("gather_elements_grad: " + targets.status().message());
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  for (size_t i = 0; i < targets->size(); ++i) dx[static_cast<size_t>((*targets)[i])] += dy[i];
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// dx = zeros of input_shape; each dy element adds into the inputs resize read, with their weights.
References resizeGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]);
  const ResizeGeometry g = resizeGeometry(c, c.results[0].shape, operands[0]->type.shape);
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  for (size_t i = 0; i < dy.size(); ++i)
    forEachResizeSource(g, static_cast<int64_t>(i), [&](int64_t offset, double weight) {
      dx[static_cast<size_t>(offset)] += weight * dy[i];
    });
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// dx = zeros of data_shape; each dy element adds into the data element gather_nd read.
References gatherNdGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> targets, gatherNdSources(c.results[0].shape, *operands[1], c.getInt("batch_dims")));
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  for (size_t i = 0; i < targets.size(); ++i) dx[static_cast<size_t>(targets[i])] += dy[i];
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// ONNX Slice's first index and step per dim of `shape` (negative starts/ends count from the end, then
// clamp: [0, dim] for positive steps, [0, dim-1] and [-1, dim-1] for negative ones).
void sliceStarts(const OpContext& c, const Shape& shape, std::vector<int64_t>& first, std::vector<int64_t>& step) {
  const std::vector<int64_t>& starts = c.getInts("starts");
  std::vector<int64_t> axes = c.getInts("axes"), steps = c.getInts("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  first.assign(shape.size(), 0);
  step.assign(shape.size(), 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalizeAxis(axes[i], static_cast<int64_t>(shape.size()));
    const int64_t dim = shape[axis];
    const int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    first[axis] = steps[i] > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
    step[axis] = steps[i];
  }
}

// dx = zeros of input_shape with dy written where slice read.
References sliceGradReference(const OpContext& c, Operands operands) {
  const std::vector<double> dy = referenceValues(*operands[0]);
  const Shape& in = c.results[0].shape;
  const Shape& sliced = c.operands[0].shape;
  std::vector<int64_t> first, step;
  sliceStarts(c, in, first, step);
  std::vector<double> dx(static_cast<size_t>(c.results[0].numel()), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i) {
    const std::vector<int64_t> idx = unravelIndex(i, sliced);
    int64_t offset = 0;
    for (size_t d = 0; d < in.size(); ++d) offset = offset * in[d] + first[d] + idx[d] * step[d];
    dx[offset] = dy[i];
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], dx)};
}

// dlogits = dloss · (softmax(row) − onehot(label)) / count for counted rows; 0 for ignored rows.
References softmaxCrossEntropyGradReference(const OpContext& c, Operands operands) {
  const double dloss = referenceValues(*operands[0])[0];
  const std::vector<double> logits = referenceValues(*operands[1]), labels = referenceValues(*operands[2]);
  const int64_t classes = c.operands[1].shape.back(), ignore_index = c.getInt("ignore_index");
  int64_t count = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label == ignore_index) continue;
    if (label < 0 || label >= classes)
      return Status::badInput("softmax_cross_entropy_grad: label " + std::to_string(label) + " at position " +
                              std::to_string(r) + " is out of range [0, " + std::to_string(classes) + ")");
    ++count;
  }
  std::vector<double> dlogits(logits.size(), 0.0);
  for (int64_t r = 0; r < static_cast<int64_t>(labels.size()); ++r) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label == ignore_index) continue;
    double max = -INFINITY, sum = 0;
    for (int64_t k = 0; k < classes; ++k) max = std::max(max, logits[r * classes + k]);
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(logits[r * classes + k] - max);
    for (int64_t k = 0; k < classes; ++k)
      dlogits[r * classes + k] =
          dloss * (std::exp(logits[r * classes + k] - max) / sum - (k == label ? 1.0 : 0.0)) / static_cast<double>(count);
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], dlogits)};
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
    table.push_back(OpDef{id, name, summary, 2, 2, std::move(attrs), checkedShapeRule<elementwiseGradShape>, checkedCostRule<elementwiseGradCost>,
                          checkedShardingRule<elementwiseGradSharding>});
  };
  elementwise(OpId::relu_grad, "relu_grad", "dy where x > 0, else 0");
  elementwise(OpId::gelu_grad, "gelu_grad", "dy times the derivative of gelu at x",
              {optionalString("approximate", "none")});
  appendedDef(table, OpId::gelu_grad).cost = checkedCostRule<geluGradCost>;
  elementwise(OpId::tanh_grad, "tanh_grad", "dy * (1 - y^2) from tanh's result y");
  elementwise(OpId::sigmoid_grad, "sigmoid_grad", "dy * y * (1 - y) from sigmoid's result y");
  // The activation gradients the fusion pass may merge into fused nodes.
  for (OpId id : {OpId::relu_grad, OpId::gelu_grad, OpId::tanh_grad, OpId::sigmoid_grad}) appendedDef(table, id).fusable = true;
  table.push_back(OpDef{OpId::softmax_grad, "softmax_grad", "y * (dy - sum(dy * y)) along axis", 2, 2,
                        {optionalInt("axis", -1)}, checkedShapeRule<axisGradShape>, checkedCostRule<elementwiseGradCost>, checkedShardingRule<axisGradSharding>});
  table.push_back(OpDef{OpId::log_softmax_grad, "log_softmax_grad", "dy - exp(y) * sum(dy) along axis", 2, 2,
                        {optionalInt("axis", -1)}, checkedShapeRule<axisGradShape>, checkedCostRule<elementwiseGradCost>, checkedShardingRule<axisGradSharding>});
  table.push_back(OpDef{OpId::layer_norm_grad, "layer_norm_grad", "gradients of layer_norm: dx, dscale, dbias", 3, 3,
                        {optionalInt("axis", -1), optionalFloat("epsilon", 1e-5)}, checkedShapeRule<layerNormGradShape>, checkedCostRule<layerNormGradCost>,
                        checkedShardingRule<layerNormGradSharding>});
  appendedDef(table, OpId::layer_norm_grad).fusable_along_last_axis = true;
  table.push_back(OpDef{OpId::rms_norm_grad, "rms_norm_grad", "gradients of rms_norm: dx, dscale", 3, 3,
                        {optionalInt("axis", -1), optionalFloat("epsilon", 1e-6)}, checkedShapeRule<rmsNormGradShape>,
                        checkedCostRule<layerNormGradCost>, checkedShardingRule<layerNormGradSharding>});
  appendedDef(table, OpId::rms_norm_grad).fusable_along_last_axis = true;
  table.push_back(OpDef{OpId::conv2d_grad_input, "conv2d_grad_input", "gradient of conv2d with respect to its input",
                        2, 2, convAttrs("input_shape"), checkedShapeRule<convGradInputShape>, checkedCostRule<convGradCost>, checkedShardingRule<convGradInputSharding>});
  table.push_back(OpDef{OpId::conv2d_grad_weight, "conv2d_grad_weight",
                        "gradient of conv2d with respect to its weight", 2, 2, convAttrs("weight_shape"),
                        checkedShapeRule<convGradWeightShape>, checkedCostRule<convGradCost>, checkedShardingRule<convGradWeightSharding>});
  table.push_back(OpDef{OpId::max_pool2d_grad, "max_pool2d_grad", "routes dy to each window's first maximum", 2, 2,
                        poolAttrs(false), checkedShapeRule<maxPoolGradShape>, checkedCostRule<poolGradCost>, checkedShardingRule<poolGradSharding>});
  table.push_back(OpDef{OpId::avg_pool2d_grad, "avg_pool2d_grad", "spreads dy evenly over each window", 1, 1,
                        poolAttrs(true), checkedShapeRule<avgPoolGradShape>, checkedCostRule<poolGradCost>, checkedShardingRule<poolGradSharding>});
  table.push_back(OpDef{OpId::gather_grad, "gather_grad", "scatter-adds dy into zeros of the gathered data's shape",
                        2, 2, {requiredAttr("data_shape", AttrKind::kInts), optionalInt("axis", 0)}, checkedShapeRule<gatherLikeGradShape<OpId::gather>>,
                        checkedCostRule<elementwiseGradCost>, checkedShardingRule<gatherGradSharding>});
  table.push_back(OpDef{OpId::gather_elements_grad, "gather_elements_grad",
                        "scatter-adds dy where gather_elements read, into zeros of data_shape", 2, 2,
                        {requiredAttr("data_shape", AttrKind::kInts), optionalInt("axis", 0)},
                        checkedShapeRule<gatherLikeGradShape<OpId::gather_elements>>, checkedCostRule<elementwiseGradCost>,
                        checkedShardingRule<gatherElementsGradSharding>});
  table.push_back(OpDef{OpId::gather_nd_grad, "gather_nd_grad",
                        "scatter-adds dy into the slices gather_nd read, in zeros of data_shape", 2, 2,
                        {requiredAttr("data_shape", AttrKind::kInts), optionalInt("batch_dims", 0)},
                        checkedShapeRule<gatherLikeGradShape<OpId::gather_nd>>, checkedCostRule<elementwiseGradCost>,
                        checkedShardingRule<gatherNdGradSharding>});
  table.push_back(OpDef{OpId::resize_grad, "resize_grad", "spreads dy onto the inputs resize read, with its weights", 1, 1,
                        {requiredAttr("input_shape", AttrKind::kInts), optionalFloats("scales", {}),
                         optionalString("mode", "nearest"), optionalString("coordinate_transformation_mode", "half_pixel"),
                         optionalString("nearest_mode", "round_prefer_floor"), optionalFloat("cubic_coeff_a", -0.75),
                         optionalInt("exclude_outside", 0)},
                        checkedShapeRule<resizeGradShape>, checkedCostRule<elementwiseGradCost>,
                        checkedShardingRule<resizeGradSharding>});
  table.push_back(OpDef{OpId::slice_grad, "slice_grad", "places dy where slice read, zeros elsewhere", 1, 1,
                        {requiredAttr("input_shape", AttrKind::kInts), requiredAttr("starts", AttrKind::kInts), requiredAttr("ends", AttrKind::kInts),
                         optionalInts("axes", {}), optionalInts("steps", {})},
                        checkedShapeRule<sliceGradShape>, checkedCostRule<elementwiseGradCost>, checkedShardingRule<sliceGradSharding>});
  table.push_back(OpDef{OpId::softmax_cross_entropy_grad, "softmax_cross_entropy_grad",
                        "dloss * (softmax(logits) - onehot(labels)) / count", 3, 3, {optionalInt("ignore_index", -100)},
                        checkedShapeRule<softmaxCrossEntropyGradShape>, checkedCostRule<elementwiseGradCost>, checkedShardingRule<softmaxCrossEntropyGradSharding>});
  const std::pair<OpId, ReferenceRule> references[] = {
      {OpId::relu_grad, reluGradReference},
      {OpId::gelu_grad, geluGradReference},
      {OpId::tanh_grad, tanhGradReference},
      {OpId::sigmoid_grad, sigmoidGradReference},
      {OpId::softmax_grad, softmaxGradReference<false>},
      {OpId::log_softmax_grad, softmaxGradReference<true>},
      {OpId::layer_norm_grad, layerNormGradReference},
      {OpId::rms_norm_grad, rmsNormGradReference},
      {OpId::conv2d_grad_input, convGradInputReference},
      {OpId::conv2d_grad_weight, convGradWeightReference},
      {OpId::max_pool2d_grad, maxPoolGradReference},
      {OpId::avg_pool2d_grad, avgPoolGradReference},
      {OpId::gather_grad, gatherGradReference},
      {OpId::gather_elements_grad, gatherElementsGradReference},
      {OpId::gather_nd_grad, gatherNdGradReference},
      {OpId::resize_grad, resizeGradReference},
      {OpId::slice_grad, sliceGradReference},
      {OpId::softmax_cross_entropy_grad, softmaxCrossEntropyGradReference},
  };
  for (const auto& [id, reference] : references) {
    appendedDef(table, id).reference = reference;
    appendedDef(table, id).reference_supports = referenceDTypes;
  }

  // Gradient rules.
  appendedDef(table, OpId::conv2d_grad_input).gradient = conv2dGradInputGradient;
}

}  // namespace cleave::ops
