// Gradient rules: for each differentiable op, how autodiff emits its backward computation.
//
// A rule reads the forward node (ctx.node), the gradients of its results (ctx.result_grads) and
// sets ctx.operand_grads, emitting backward nodes with ctx.emit(). Each gradient has its operand's
// exact type: broadcasting ops sum theirs back with ctx.reduceToShape(). Integer and bool operands
// (indices, labels, conditions) get no gradient. Ops without a rule here (comparisons, constant,
// the gradient and optimizer ops) are not differentiable: autodiff reports them when they lie on
// the path from a trainable parameter to the loss.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "ir/gradient.h"
#include "ir/op_table.h"

namespace cleave::ops {
namespace {

// ---- Helpers ----

// The forward node's attributes, with the op's defaults for those it does not set.
OpContext forwardAttrs(const GradientContext& g) { return OpContext{opDef(g.node.op), {}, {}, g.node.attrs}; }

// The attributes among `names` that the forward node sets explicitly (the backward op shares their defaults).
AttrMap copyAttrs(const GradientContext& g, std::initializer_list<const char*> names) {
  AttrMap copied;
  for (const char* name : names) {
    auto it = g.node.attrs.find(name);
    if (it != g.node.attrs.end()) copied.emplace(name, it->second);
  }
  return copied;
}

// Copies, since emitting nodes may move graph.values.
Shape shapeOf(const GradientContext& g, ValueId v) { return g.typeOf(v).shape; }
DType dtypeOf(const GradientContext& g, ValueId v) { return g.typeOf(v).dtype; }
ValueId dy(const GradientContext& g) { return g.result_grads[0]; }

// Zeros of `type`: a scalar zero expanded (no dense constant in the graph).
ValueId zeros(GradientContext& g, TensorType type) {
  return g.emit(OpId::expand, {g.scalar(0.0, type.dtype)}, {{"shape", type.shape}});
}

// `v` reshaped to `shape` (no node when it already has it).
ValueId reshapeTo(GradientContext& g, ValueId v, const Shape& shape) {
  if (v == kNoValue || shapeOf(g, v) == shape) return v;
  return g.emit(OpId::reshape, {v}, {{"shape", shape}});
}

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

// ---- Linear algebra ----

// One operand's gradient of y = op(a)·op(b), as a product lhs·rhs with transpose flags.
struct GradientProduct {
  ValueId lhs, rhs;
  bool transpose_lhs, transpose_rhs;
};

// The products giving da and db from dy (op(x) is x or xᵀ per the forward transpose flags).
std::pair<GradientProduct, GradientProduct> productGradients(ValueId a, ValueId b, ValueId dy, bool transpose_a,
                                                             bool transpose_b) {
  if (!transpose_a && !transpose_b) return {{dy, b, false, true}, {a, dy, true, false}};    // a·b
  if (!transpose_a && transpose_b) return {{dy, b, false, false}, {dy, a, true, false}};    // a·bᵀ
  if (transpose_a && !transpose_b) return {{b, dy, false, true}, {a, dy, false, false}};    // aᵀ·b
  return {{b, dy, true, true}, {dy, a, true, true}};                                        // aᵀ·bᵀ
}

// A matmul or gemm computing `p`, with `extra` attributes (gemm's alpha).
ValueId emitProduct(GradientContext& g, OpId op, const GradientProduct& p, AttrMap extra = {}) {
  if (p.transpose_lhs) extra.emplace("transpose_a", int64_t{1});
  if (p.transpose_rhs) extra.emplace("transpose_b", int64_t{1});
  return g.emit(op, {p.lhs, p.rhs}, std::move(extra));
}

Status matmulGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  ValueId a = g.operand(0), b = g.operand(1);
  auto [da, db] = productGradients(a, b, dy(g), attrs.getInt("transpose_a") == 1, attrs.getInt("transpose_b") == 1);
  // Batch dims broadcast: each product has the result's batch dims, summed back to the operand's.
  g.operand_grads[0] = g.reduceToShape(emitProduct(g, OpId::matmul, da), shapeOf(g, a));
  const Shape& a_shape = shapeOf(g, a);
  if (shapeOf(g, b).size() == 2 && a_shape.size() > 2 && attrs.getInt("transpose_a") == 0) {
    // A weight shared by every batch row (activations [..., m, k] times [k, n]): fold the batch
    // dims into m, so the weight gradient is one 2-D product instead of a batch of products summed.
    int64_t k = a_shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < a_shape.size(); ++d) rows *= a_shape[d];
    ValueId a2 = reshapeTo(g, a, {rows, k});
    ValueId dy2 = reshapeTo(g, dy(g), {rows, shapeOf(g, dy(g)).back()});
    auto [unused, db2] = productGradients(a2, b, dy2, false, attrs.getInt("transpose_b") == 1);
    g.operand_grads[1] = emitProduct(g, OpId::matmul, db2);
    return g.status;
  }
  g.operand_grads[1] = g.reduceToShape(emitProduct(g, OpId::matmul, db), shapeOf(g, b));
  return g.status;
}

Status gemmGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  double alpha = attrs.getFloat("alpha"), beta = attrs.getFloat("beta");
  auto [da, db] = productGradients(g.operand(0), g.operand(1), dy(g), attrs.getInt("transpose_a") == 1,
                                   attrs.getInt("transpose_b") == 1);
  AttrMap scale;
  if (alpha != 1.0) scale.emplace("alpha", alpha);
  g.operand_grads[0] = emitProduct(g, OpId::gemm, da, scale);
  g.operand_grads[1] = emitProduct(g, OpId::gemm, db, scale);
  if (g.node.operands.size() == 3) {
    ValueId dc = beta == 1.0 ? dy(g) : g.emit(OpId::mul, {dy(g), g.scalar(beta, dtypeOf(g, dy(g)))});
    g.operand_grads[2] = g.reduceToShape(dc, shapeOf(g, g.operand(2)));
  }
  return g.status;
}

// ---- Elementwise binary ops (numpy broadcasting: each gradient is summed back to its operand) ----

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

// ---- Elementwise unary ops ----

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

// ---- Reductions and normalisation ----

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

// ---- Convolution and pooling ----

Status conv2dGradient(GradientContext& g) {
  ValueId x = g.operand(0), w = g.operand(1);
  AttrMap input_attrs = copyAttrs(g, {"strides", "pads", "dilations", "groups"});
  AttrMap weight_attrs = input_attrs;
  input_attrs.emplace("input_shape", shapeOf(g, x));
  weight_attrs.emplace("weight_shape", shapeOf(g, w));
  g.operand_grads[0] = g.emit(OpId::conv2d_grad_input, {dy(g), w}, std::move(input_attrs));
  g.operand_grads[1] = g.emit(OpId::conv2d_grad_weight, {dy(g), x}, std::move(weight_attrs));
  if (g.node.operands.size() == 3)
    g.operand_grads[2] = g.emit(OpId::reduce_sum, {dy(g)}, {{"axes", std::vector<int64_t>{0, 2, 3}}, {"keepdims", int64_t{0}}});
  return g.status;
}

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

Status maxPool2dGradient(GradientContext& g) {
  g.operand_grads[0] =
      g.emit(OpId::max_pool2d_grad, {dy(g), g.operand(0)}, copyAttrs(g, {"kernel", "strides", "pads", "ceil_mode"}));
  return g.status;
}

Status avgPool2dGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"kernel", "strides", "pads", "ceil_mode", "count_include_pad"});
  attrs.emplace("input_shape", shapeOf(g, g.operand(0)));
  g.operand_grads[0] = g.emit(OpId::avg_pool2d_grad, {dy(g)}, std::move(attrs));
  return g.status;
}

// A mean over H and W: dy [N,C,1,1] scaled by 1/(H·W) and expanded.
Status globalAvgPoolGradient(GradientContext& g) {
  const Shape x = shapeOf(g, g.operand(0));
  double count = static_cast<double>(x[2] * x[3]);
  ValueId scaled = g.emit(OpId::mul, {dy(g), g.scalar(1.0 / count, dtypeOf(g, dy(g)))});
  g.operand_grads[0] = g.emit(OpId::expand, {scaled}, {{"shape", x}});
  return g.status;
}

// ---- Shape and data movement ----

// reshape, flatten, squeeze and unsqueeze only relabel dims: the gradient is reshaped back.
Status reshapeGradient(GradientContext& g) {
  g.operand_grads[0] = reshapeTo(g, dy(g), shapeOf(g, g.operand(0)));
  return g.status;
}

Status transposeGradient(GradientContext& g) {
  const std::vector<int64_t>& perm = forwardAttrs(g).getInts("perm");
  AttrMap attrs;  // no perm: reversed dims, which are their own inverse
  if (!perm.empty()) {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[normalizeAxis(perm[i], static_cast<int64_t>(perm.size()))] = static_cast<int64_t>(i);
    attrs.emplace("perm", std::move(inverse));
  }
  g.operand_grads[0] = g.emit(OpId::transpose, {dy(g)}, std::move(attrs));
  return g.status;
}

// One split of dy along the concat axis gives every operand its piece.
Status concatGradient(GradientContext& g) {
  int64_t rank = g.typeOf(g.result(0)).rank();
  int64_t axis = normalizeAxis(forwardAttrs(g).getInt("axis"), rank);
  std::vector<int64_t> sizes;
  for (ValueId v : g.node.operands) sizes.push_back(shapeOf(g, v)[axis]);
  std::vector<ValueId> pieces = g.emitAll(OpId::split, {dy(g)}, {{"axis", axis}, {"sizes", sizes}});
  if (pieces.size() != g.node.operands.size()) return g.status;
  g.operand_grads = pieces;
  return g.status;
}

// The results' gradients concatenated back, with zeros for results no gradient reached.
Status splitGradient(GradientContext& g) {
  std::vector<ValueId> pieces;
  for (size_t r = 0; r < g.node.results.size(); ++r)
    pieces.push_back(g.result_grads[r] != kNoValue ? g.result_grads[r] : zeros(g, g.typeOf(g.result(r))));
  int64_t axis = normalizeAxis(forwardAttrs(g).getInt("axis"), g.typeOf(g.operand(0)).rank());
  g.operand_grads[0] = g.emit(OpId::concat, std::move(pieces), {{"axis", axis}});
  return g.status;
}

Status sliceGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"starts", "ends", "axes", "steps"});
  attrs.emplace("input_shape", shapeOf(g, g.operand(0)));
  g.operand_grads[0] = g.emit(OpId::slice_grad, {dy(g)}, std::move(attrs));
  return g.status;
}

// dy is scatter-added into the gathered rows; the indices get no gradient.
Status gatherGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"axis"});
  attrs.emplace("data_shape", shapeOf(g, g.operand(0)));
  g.operand_grads[0] = g.emit(OpId::gather_grad, {dy(g), g.operand(1)}, std::move(attrs));
  return g.status;
}

Status expandGradient(GradientContext& g) {
  g.operand_grads[0] = g.reduceToShape(dy(g), shapeOf(g, g.operand(0)));
  return g.status;
}

Status triluGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::trilu, {dy(g)}, copyAttrs(g, {"upper", "k"}));
  return g.status;
}

// ---- Losses ----

Status softmaxCrossEntropyGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::softmax_cross_entropy_grad, {dy(g), g.operand(0), g.operand(1)},
                              copyAttrs(g, {"ignore_index"}));
  return g.status;
}

// loss = mean((p − t)²): dp = 2 · (p − t) / N · dloss, dt = −dp.
Status mseGradient(GradientContext& g) {
  ValueId prediction = g.operand(0), target = g.operand(1);
  DType dtype = dtypeOf(g, prediction);
  ValueId dloss = dy(g);
  if (dtypeOf(g, dloss) != dtype) dloss = g.emit(OpId::cast, {dloss}, {{"to", std::string(dtypeName(dtype))}});
  double count = static_cast<double>(g.typeOf(prediction).numel());
  ValueId scale = g.emit(OpId::mul, {dloss, g.scalar(2.0 / count, dtype)});
  ValueId dprediction = g.emit(OpId::mul, {g.emit(OpId::sub, {prediction, target}), scale});
  g.operand_grads[0] = dprediction;
  g.operand_grads[1] = g.emit(OpId::neg, {dprediction});
  return g.status;
}

// ---- Communication (cotangents of replicated values are whole on every device) ----

AttrMap groupAttrs(const GradientContext& g, std::initializer_list<const char*> extra = {}) {
  AttrMap attrs = copyAttrs(g, {"axis", "group_size"});
  for (const char* name : extra) {
    auto it = g.node.attrs.find(name);
    if (it != g.node.attrs.end()) attrs.emplace(name, it->second);
  }
  return attrs;
}

// y = sum over devices of x: each device's x gets the whole dy; mean also divides by the group size.
Status allReduceGradient(GradientContext& g) {
  const std::string& reduce = forwardAttrs(g).getString("reduce");
  if (reduce == "max")
    return Status::badInput(nodeContext(g.graph, g.node) + "all_reduce with reduce = max has no gradient");
  double n = static_cast<double>(forwardAttrs(g).getInt("group_size"));
  for (size_t i = 0; i < g.node.operands.size(); ++i) {
    ValueId grad = g.result_grads[i];
    if (grad != kNoValue && reduce == "mean") grad = g.emit(OpId::mul, {grad, g.scalar(1.0 / n, dtypeOf(g, grad))});
    g.operand_grads[i] = grad;
  }
  return g.status;
}

// The identity whose users are split over the axis: their gradients are partial sums.
Status gradAllReduceGradient(GradientContext& g) {
  AttrMap attrs = groupAttrs(g);
  attrs.emplace("reduce", std::string("sum"));
  g.operand_grads[0] = g.emit(OpId::all_reduce, {dy(g)}, std::move(attrs));
  return g.status;
}

Status allGatherGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::shard_slice, {dy(g)}, groupAttrs(g, {"dim"}));
  return g.status;
}

// reduce_scatter and shard_slice: the device's block of dy comes back whole from every device.
Status gatherBackGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::all_gather, {dy(g)}, groupAttrs(g, {"dim"}));
  return g.status;
}

Status allToAllGradient(GradientContext& g) {
  AttrMap attrs = groupAttrs(g);
  OpContext forward = forwardAttrs(g);
  attrs.emplace("split_dim", forward.getInt("concat_dim"));
  attrs.emplace("concat_dim", forward.getInt("split_dim"));
  g.operand_grads[0] = g.emit(OpId::all_to_all, {dy(g)}, std::move(attrs));
  return g.status;
}

}  // namespace

void addGradientRules(std::vector<OpDef>& defs_by_id) {
  auto set = [&](OpId id, GradientRule rule) { defs_by_id[static_cast<int>(id)].gradient = rule; };
  set(OpId::matmul, matmulGradient);
  set(OpId::gemm, gemmGradient);
  set(OpId::add, addGradient);
  set(OpId::sub, subGradient);
  set(OpId::mul, mulGradient);
  set(OpId::div, divGradient);
  set(OpId::pow, powGradient);
  set(OpId::sqrt, sqrtGradient);
  set(OpId::exp, expGradient);
  set(OpId::log, logGradient);
  set(OpId::neg, negGradient);
  set(OpId::erf, erfGradient);
  set(OpId::tanh, tanhGradient);
  set(OpId::sigmoid, sigmoidGradient);
  set(OpId::relu, reluGradient);
  set(OpId::gelu, geluGradient);
  set(OpId::clip, clipGradient);
  set(OpId::cast, castGradient);
  set(OpId::where, whereGradient);
  set(OpId::identity, identityGradient);
  set(OpId::dropout, dropoutGradient);
  set(OpId::reduce_sum, reduceSumGradient);
  set(OpId::reduce_mean, reduceMeanGradient);
  set(OpId::reduce_max, reduceMaxGradient);
  set(OpId::softmax, softmaxGradient);
  set(OpId::log_softmax, logSoftmaxGradient);
  set(OpId::layer_norm, layerNormGradient);
  set(OpId::batch_norm, batchNormGradient);
  set(OpId::conv2d, conv2dGradient);
  set(OpId::conv2d_grad_input, conv2dGradInputGradient);
  set(OpId::max_pool2d, maxPool2dGradient);
  set(OpId::avg_pool2d, avgPool2dGradient);
  set(OpId::global_avg_pool, globalAvgPoolGradient);
  set(OpId::reshape, reshapeGradient);
  set(OpId::flatten, reshapeGradient);
  set(OpId::squeeze, reshapeGradient);
  set(OpId::unsqueeze, reshapeGradient);
  set(OpId::transpose, transposeGradient);
  set(OpId::concat, concatGradient);
  set(OpId::split, splitGradient);
  set(OpId::slice, sliceGradient);
  set(OpId::gather, gatherGradient);
  set(OpId::expand, expandGradient);
  set(OpId::trilu, triluGradient);
  set(OpId::softmax_cross_entropy, softmaxCrossEntropyGradient);
  set(OpId::mse, mseGradient);
  set(OpId::all_reduce, allReduceGradient);
  set(OpId::grad_all_reduce, gradAllReduceGradient);
  set(OpId::all_gather, allGatherGradient);
  set(OpId::reduce_scatter, gatherBackGradient);
  set(OpId::shard_slice, gatherBackGradient);
  set(OpId::all_to_all, allToAllGradient);
}

}  // namespace cleave::ops
