// Convolution and pooling over NCHW images (conv2d and max_pool2d also NHWC: ir/ops/image_layout.h):
// conv2d, max_pool2d, avg_pool2d, global_avg_pool; resize (any rank).
#include <cmath>

#include "ir/ops/image_layout.h"
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"
#include "ir/ops/resize_coordinates.h"

namespace cleave {

ResizeGeometry resizeGeometry(const OpContext& op, const Shape& in, const Shape& out) {
  ResizeGeometry g;
  g.rank = static_cast<int>(in.size());
  const std::vector<double>& scales = op.getFloats("scales");
  for (int d = 0; d < g.rank && d < kMaxResizeDims; ++d) {
    g.in[d] = in[d];
    g.out[d] = out[d];
    g.scale[d] = scales.empty() ? static_cast<double>(out[d]) / static_cast<double>(in[d]) : scales[d];
    g.out_length[d] = scales.empty() ? static_cast<double>(out[d]) : static_cast<double>(in[d]) * scales[d];
  }
  g.sampling.mode = resizeModeFrom(op.getString("mode"));
  g.sampling.coordinates = resizeCoordinatesFrom(op.getString("coordinate_transformation_mode"));
  g.sampling.nearest = resizeNearestFrom(op.getString("nearest_mode"));
  g.sampling.cubic_a = op.getFloat("cubic_coeff_a");
  g.sampling.exclude_outside = op.getInt("exclude_outside") != 0;
  return g;
}

}  // namespace cleave

namespace cleave::ops {
namespace {

// One spatial dimension of a sliding window.
struct WindowDim {
  const char* name;  // "height" or "width", for messages
  int64_t input;
  int64_t pad_begin;
  int64_t pad_end;
  int64_t kernel;
  int64_t stride;
  int64_t dilation;
};

using Wide = __int128;

// Decimal text of a 128-bit integer, for messages.
std::string wideStr(Wide v) {
  if (v < 0) return "-" + wideStr(-v);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v > 0);
  return digits;
}

// Output length of a sliding window: floor((input + pads - dilated kernel) / stride) + 1, or with
// ceil_mode the ceiling, dropping a last window that would start in the end padding (as PyTorch).
// Computed in 128-bit arithmetic: every term is an int64, so nothing overflows; a length that does
// not fit in int64 or is below 1 is an error naming operand 0.
Expected<int64_t> windowOutputSize(const OpContext& ctx, const WindowDim& w, bool ceil_mode) {
  Wide padded = Wide(w.input) + w.pad_begin + w.pad_end;
  Wide dilated_kernel = Wide(w.dilation) * (w.kernel - 1) + 1;
  Wide span = padded - dilated_kernel;
  if (span < 0)
    return operandShapeError(ctx, 0,
                             std::string("its padded ") + w.name + " (" + wideStr(padded) +
                                 ") is smaller than the dilated kernel (" + wideStr(dilated_kernel) +
                                 "), so the output is empty");
  Wide size = (ceil_mode ? (span + w.stride - 1) / w.stride : span / w.stride) + 1;
  if (ceil_mode && (size - 1) * w.stride >= Wide(w.input) + w.pad_begin) size -= 1;
  if (size > Wide(INT64_MAX)) return operandShapeError(ctx, 0, std::string("its output ") + w.name + " is too large");
  return static_cast<int64_t>(size);
}

// An ints attribute with exactly `count` entries, each at least `min_value`.
Expected<std::vector<int64_t>> intsAttr(const OpContext& ctx, std::string_view attr, size_t count, int64_t min_value) {
  const std::vector<int64_t>& values = ctx.getInts(attr);
  if (values.size() != count)
    return attrError(ctx, attr, "is " + intsStr(values) + ", needs " + std::to_string(count) + " values");
  for (int64_t v : values)
    if (v < min_value) return attrError(ctx, attr, "is " + intsStr(values) + ", values must be >= " + std::to_string(min_value));
  return values;
}

// The layout attribute: NCHW or NHWC.
Status requireLayout(const OpContext& ctx) {
  const std::string& layout = ctx.getString("layout");
  if (layout != kChannelsFirst && layout != kChannelsLast)
    return attrError(ctx, "layout", "is \"" + layout + "\", must be NCHW or NHWC");
  return Status::ok();
}

Expected<std::vector<TensorType>> conv2dShape(const OpContext& ctx) {
  // 1. Operands: x [N,C,H,W] (or [N,H,W,C] with layout NHWC) and w [O,C/groups,kh,kw] of one float
  //    dtype, optional b [O].
  CLEAVE_TRY(requireRank(ctx, 0, 4, 4));
  CLEAVE_TRY(requireRank(ctx, 1, 4, 4));
  CLEAVE_TRY(requireFloat(ctx, 0));
  CLEAVE_TRY(requireSameDType(ctx, 1, 0));
  // 2. Attributes.
  CLEAVE_TRY(requireLayout(ctx));
  CLEAVE_TRY(requireFlag(ctx, "allow_winograd"));  // 1: the backend may use Winograd (passes/algorithm/winograd.h)
  const bool channels_last = isChannelsLast(ctx);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> strides, intsAttr(ctx, "strides", 2, 1));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> pads, intsAttr(ctx, "pads", 4, 0));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> dilations, intsAttr(ctx, "dilations", 2, 1));
  int64_t groups = ctx.getInt("groups");
  if (groups < 1) return attrError(ctx, "groups", "is " + std::to_string(groups) + ", must be >= 1");
  // 3. Channels: C and O divisible by groups, w's input channels = C / groups.
  const Shape x = asNchw(ctx.operands[0].shape, channels_last);
  const Shape& w = ctx.operands[1].shape;
  if (x[1] % groups != 0)
    return operandShapeError(ctx, 0, "its channels (" + std::to_string(x[1]) + ") are not divisible by groups (" +
                                         std::to_string(groups) + ")");
  if (w[1] != x[1] / groups)
    return operandShapeError(ctx, 1,
                             "its dim 1 (" + std::to_string(w[1]) + ") must equal operand 0's channels (" +
                                 std::to_string(x[1]) + ") / groups (" + std::to_string(groups) + ")");
  if (w[0] % groups != 0)
    return operandShapeError(ctx, 1, "its output channels (dim 0, " + std::to_string(w[0]) +
                                         ") are not divisible by groups (" + std::to_string(groups) + ")");
  if (w[2] < 1 || w[3] < 1) return operandShapeError(ctx, 1, "its kernel dims 2 and 3 must be >= 1");
  if (ctx.operands.size() == 3) {
    CLEAVE_TRY(requireSameDType(ctx, 2, 0));
    CLEAVE_TRY(requireShape(ctx, 2, {w[0]}, "operand 1's output channels"));
  }
  // 4. Output size per spatial dim.
  CLEAVE_ASSIGN_OR_RETURN(int64_t out_h,
                          windowOutputSize(ctx, {"height", x[2], pads[0], pads[2], w[2], strides[0], dilations[0]}, false));
  CLEAVE_ASSIGN_OR_RETURN(int64_t out_w,
                          windowOutputSize(ctx, {"width", x[3], pads[1], pads[3], w[3], strides[1], dilations[1]}, false));
  const Shape y = {x[0], w[0], out_h, out_w};
  return std::vector<TensorType>{{ctx.operands[0].dtype, channels_last ? asNhwc(y) : y}};
}

// fused_conv2d: conv2d's operands x, w, b (the bias required), then optionally a residual of the
// result's shape; activation none or relu.
Expected<std::vector<TensorType>> fusedConv2dShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> results,
                          conv2dShape(OpContext{ctx.def, ctx.operands.first(3), {}, ctx.attrs}));
  if (ctx.operands.size() == 4) {
    CLEAVE_TRY(requireSameDType(ctx, 3, 0));
    CLEAVE_TRY(requireShape(ctx, 3, results[0].shape, "the result"));
  }
  const std::string& activation = ctx.getString("activation");
  if (activation != "none" && activation != "relu")
    return attrError(ctx, "activation", "is \"" + activation + "\", must be none or relu");
  return results;
}

Expected<std::vector<TensorType>> poolShape(const OpContext& ctx) {
  // 1. Operand: x [N,C,H,W], float.
  CLEAVE_TRY(requireRank(ctx, 0, 4, 4));
  CLEAVE_TRY(requireFloat(ctx, 0));
  // 2. Attributes: kernel >= 1; strides default to the kernel; pads at most half the kernel (as
  //    PyTorch), so every window overlaps the input.
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, intsAttr(ctx, "kernel", 2, 1));
  std::vector<int64_t> strides = kernel;
  if (!ctx.getInts("strides").empty()) {
    CLEAVE_ASSIGN_OR_RETURN(strides, intsAttr(ctx, "strides", 2, 1));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> pads, intsAttr(ctx, "pads", 4, 0));
  for (int i = 0; i < 4; ++i)
    if (pads[i] > kernel[i % 2] / 2)
      return attrError(ctx, "pads", "is " + intsStr(pads) + ", each pad must be at most half its kernel dim " +
                                        intsStr(kernel));
  CLEAVE_TRY(requireFlag(ctx, "ceil_mode"));
  CLEAVE_TRY(requireFlag(ctx, "count_include_pad"));
  bool ceil_mode = ctx.getInt("ceil_mode") == 1;
  if (ctx.def.id == OpId::max_pool2d) CLEAVE_TRY(requireLayout(ctx));
  const bool channels_last = isChannelsLast(ctx);
  // 3. Output size per spatial dim.
  const Shape x = asNchw(ctx.operands[0].shape, channels_last);
  CLEAVE_ASSIGN_OR_RETURN(int64_t out_h,
                          windowOutputSize(ctx, {"height", x[2], pads[0], pads[2], kernel[0], strides[0], 1}, ceil_mode));
  CLEAVE_ASSIGN_OR_RETURN(int64_t out_w,
                          windowOutputSize(ctx, {"width", x[3], pads[1], pads[3], kernel[1], strides[1], 1}, ceil_mode));
  const Shape y = {x[0], x[1], out_h, out_w};
  return std::vector<TensorType>{{ctx.operands[0].dtype, channels_last ? asNhwc(y) : y}};
}

Expected<std::vector<TensorType>> globalAvgPoolShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 4, 4));
  CLEAVE_TRY(requireFloat(ctx, 0));
  const Shape& x = ctx.operands[0].shape;
  return std::vector<TensorType>{{ctx.operands[0].dtype, {x[0], x[1], 1, 1}}};
}

// conv2d: 2·N·O·Ho·Wo·(C/groups)·kh·kw multiply-adds counted as 2 FLOPs, plus N·O·Ho·Wo bias adds.
OpCost conv2dCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const Shape& w = ctx.operands[1].shape;
  double out = static_cast<double>(results[0].numel());  // N·O·Ho·Wo
  double per_output = static_cast<double>(w[1]) * static_cast<double>(w[2]) * static_cast<double>(w[3]);
  // The bias add, and fused_conv2d's residual add and activation.
  double flops = 2 * out * per_output + static_cast<double>(ctx.operands.size() - 2) * out +
                 (ctx.def.id == OpId::fused_conv2d && ctx.getString("activation") != "none" ? out : 0);
  return {flops, operandAndResultBytes(ctx, results)};
}

// Pools: one FLOP per window element per output (a compare or an add).
OpCost poolCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const std::vector<int64_t>& kernel = ctx.getInts("kernel");
  double window = static_cast<double>(kernel[0]) * static_cast<double>(kernel[1]);
  return {window * static_cast<double>(results[0].numel()), operandAndResultBytes(ctx, results)};
}

// global_avg_pool: one add per input element.
OpCost globalAvgPoolCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {static_cast<double>(ctx.operands[0].numel()), operandAndResultBytes(ctx, results)};
}

// conv2d factors: N passes through; O passes through when groups == 1 and C is then a reduction
// (each shard of input channels gives a partial sum; the bias must then be added once, after the
// all-reduce). A grouped convolution keeps O and C whole (a block of its output channels would need
// its own groups' input channels and a smaller `groups`): x's C and w's C/groups get separate
// need_replication factors. Spatial
// dims need a halo exchange to split, so input H, W, output Ho, Wo and the kernel dims kh, kw are
// need_replication factors of their own sizes.
// fused_conv2d's residual (operand 3) has the result's factors; its O is never a reduction's partial
// sum (the residual would be added once per shard), so only N passes through there.
ShardingRule conv2dShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  constexpr int kNoDim = ShardingRuleBuilder::kNoDim;
  constexpr FactorKind kReplicated = FactorKind::kNeedReplication;
  // The images' dims of C, H and W (O, Ho and Wo in the result) in the op's layout.
  const bool channels_last = isChannelsLast(ctx);
  const int c = channels_last ? 3 : 1, h = channels_last ? 1 : 2, w = channels_last ? 2 : 3;
  const bool fused = ctx.def.id == OpId::fused_conv2d;
  const int r = ctx.operands.size() == 4 ? 3 : -1;  // the residual's operand index, if any
  auto withResidual = [&](std::vector<int> dims, int residual_dim) {
    if (r >= 0) {
      dims.resize(4, kNoDim);
      dims[3] = residual_dim;
    }
    return dims;
  };
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addFactor(withResidual({0}, 0), {0});  // N
  const bool grouped = ctx.getInt("groups") != 1;
  rule.addFactor(withResidual({kNoDim, 0, 0}, c), {c},
                 grouped || fused ? kReplicated : FactorKind::kPassThrough);  // O (and the bias)
  if (!grouped && !fused) {
    rule.addFactor({c, 1}, {}, FactorKind::kReduction);  // C
  } else {
    rule.addFactor({c}, {}, kReplicated);          // x's C
    rule.addFactor({kNoDim, 1}, {}, kReplicated);  // w's C/groups
  }
  rule.addFactor({h}, {}, kReplicated);          // H
  rule.addFactor({w}, {}, kReplicated);          // W
  rule.addFactor({kNoDim, 2}, {}, kReplicated);  // kh
  rule.addFactor({kNoDim, 3}, {}, kReplicated);  // kw
  rule.addFactor(withResidual({}, h), {h}, kReplicated);  // Ho
  rule.addFactor(withResidual({}, w), {w}, kReplicated);  // Wo
  return rule.build();
}

// Pools: N and C pass through; input and output spatial dims are need_replication factors (in
// max_pool2d's layout).
ShardingRule poolShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const bool channels_last = isChannelsLast(ctx);
  const int c = channels_last ? 3 : 1;
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addFactor({0}, {0});  // N
  rule.addFactor({c}, {c});  // C
  for (int d : {1, 2, 3})
    if (d != c) rule.addOperandFactor(0, d, FactorKind::kNeedReplication);  // H, W
  for (int d : {1, 2, 3})
    if (d != c) rule.addResultFactor(0, d, FactorKind::kNeedReplication);  // Ho, Wo
  return rule.build();
}

// global_avg_pool is a mean over H and W: they are reduction factors (as reduce_mean), N and C pass
// through, and the result's 1x1 dims map to no factor.
ShardingRule globalAvgPoolShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addReduction({false, false, true, true}, /*keepdims=*/true);
  return rule.build();
}

// A pool; `layouts`: it takes the layout attribute (max_pool2d).
OpDef poolOp(OpId id, std::string_view name, std::string_view summary, bool layouts) {
  std::vector<AttrSpec> attrs = {requiredAttr("kernel", AttrKind::kInts), optionalInts("strides", {}),
                                 optionalInts("pads", {0, 0, 0, 0}), optionalInt("ceil_mode", 0),
                                 optionalInt("count_include_pad", 0)};
  if (layouts) attrs.push_back(optionalString("layout", std::string(kChannelsFirst)));
  return OpDef{.id = id,
               .name = name,
               .summary = summary,
               .attrs = std::move(attrs),
               .shape = checkedShapeRule<poolShape>,
               .cost = poolCost,
               .sharding = poolShardingRule};
}

// ---- Reference computations (double precision, naive loops) ----

// An image's values in one layout reordered to the other: NHWC -> NCHW (`to_channels_last` false,
// `shape` the NHWC one) or NCHW -> NHWC (`shape` the NCHW one).
std::vector<double> relaidOut(const std::vector<double>& values, const Shape& shape, bool to_channels_last) {
  std::vector<double> out(values.size());
  const int64_t n = shape[0], a = shape[1], b = shape[2], c = shape[3];  // [n, a, b, c] -> [n, c, a, b] or [n, b, c, a]
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < a; ++j)
      for (int64_t k = 0; k < b; ++k)
        for (int64_t l = 0; l < c; ++l) {
          const int64_t from = ((i * a + j) * b + k) * c + l;
          const int64_t to = to_channels_last ? ((i * b + k) * c + l) * a + j : ((i * c + l) * a + j) * b + k;
          out[static_cast<size_t>(to)] = values[static_cast<size_t>(from)];
        }
  return out;
}

Expected<std::vector<TensorData>> conv2dReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const bool channels_last = isChannelsLast(ctx);
  std::vector<double> x = referenceValues(*operands[0]);
  const std::vector<double> w = referenceValues(*operands[1]);
  if (channels_last) x = relaidOut(x, ctx.operands[0].shape, false);
  const Shape x_shape = asNchw(ctx.operands[0].shape, channels_last);
  const Shape y_shape = asNchw(ctx.results[0].shape, channels_last);
  std::vector<double> y(static_cast<size_t>(ctx.results[0].numel()), 0.0);
  if (operands.size() == 3) {
    const std::vector<double> b = referenceValues(*operands[2]);
    for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) y[i] = b[i / (y_shape[2] * y_shape[3]) % y_shape[1]];
  }
  forEachConvTap(x_shape, ctx.operands[1].shape, y_shape, ctx,
                 [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
  if (channels_last) y = relaidOut(y, y_shape, true);
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

// conv2d, then + residual, then the activation.
Expected<std::vector<TensorData>> fusedConv2dReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> conv,
                          conv2dReference(OpContext{ctx.def, ctx.operands.first(3), ctx.results, ctx.attrs}, operands.first(3)));
  std::vector<double> y = referenceValues(conv[0]);
  if (operands.size() == 4) {
    const std::vector<double> residual = referenceValues(*operands[3]);
    for (size_t i = 0; i < y.size(); ++i) y[i] += residual[i];
  }
  if (ctx.getString("activation") == "relu")
    for (double& v : y) v = v < 0 ? 0.0 : v;  // NaN stays, as relu
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

Expected<std::vector<TensorData>> maxPoolReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const bool channels_last = isChannelsLast(ctx);
  std::vector<double> x = referenceValues(*operands[0]);
  if (channels_last) x = relaidOut(x, ctx.operands[0].shape, false);
  const Shape y_shape = asNchw(ctx.results[0].shape, channels_last);
  std::vector<double> y(static_cast<size_t>(ctx.results[0].numel()));
  forEachPoolWindow(asNchw(ctx.operands[0].shape, channels_last), y_shape, ctx, [&](int64_t yi, const PoolWindow& p) {
    const int64_t argmax = poolWindowArgmax(x, p);
    y[yi] = argmax < 0 ? -INFINITY : x[argmax];
  });
  if (channels_last) y = relaidOut(y, y_shape, true);
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

Expected<std::vector<TensorData>> avgPoolReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const std::vector<double> x = referenceValues(*operands[0]);
  const bool count_include_pad = ctx.getInt("count_include_pad") == 1;
  std::vector<double> y(static_cast<size_t>(ctx.results[0].numel()));
  forEachPoolWindow(ctx.operands[0].shape, ctx.results[0].shape, ctx, [&](int64_t yi, const PoolWindow& p) {
    double sum = 0;
    for (int64_t ih = p.h_first; ih < p.h_last; ++ih)
      for (int64_t iw = p.w_first; iw < p.w_last; ++iw) sum += x[p.plane + ih * p.width + iw];
    const int64_t inside = (p.h_last - p.h_first) * (p.w_last - p.w_first);
    y[yi] = sum / static_cast<double>(count_include_pad ? p.padded_count : inside);
  });
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

Expected<std::vector<TensorData>> globalAvgPoolReference(const OpContext& ctx,
                                                         std::span<const TensorData* const> operands) {
  const std::vector<double> x = referenceValues(*operands[0]);
  const Shape& s = ctx.operands[0].shape;
  const int64_t plane = s[2] * s[3];
  std::vector<double> y(static_cast<size_t>(s[0] * s[1]), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) y[i / plane] += x[i];
  for (double& v : y) v /= static_cast<double>(plane);
  return std::vector<TensorData>{referenceTensor(ctx.results[0], y)};
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

// The gradients are NCHW ops: the channels-last pass runs on graphs that do not train.
Status requireChannelsFirst(GradientContext& g) {
  const OpContext ctx{opDef(g.node.op), {}, {}, g.node.attrs};
  if (isChannelsLast(ctx))
    g.status = Status::badInput(std::string(ctx.def.name) + " with layout NHWC has no gradient rule");
  return g.status;
}

Status conv2dGradient(GradientContext& g) {
  CLEAVE_TRY(requireChannelsFirst(g));
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

Status maxPool2dGradient(GradientContext& g) {
  CLEAVE_TRY(requireChannelsFirst(g));
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

// ---- resize ----

// resize: a float x of rank <= 8 to `sizes` (one per dim, >= 1); scales empty or one per dim (> 0);
// the modes as ONNX Resize names them (nearest, linear and cubic, with cubic's coefficient A and
// exclude_outside).
Expected<std::vector<TensorType>> resizeShape(const OpContext& ctx) {
  CLEAVE_TRY(requireFloat(ctx, 0));
  const Shape& in = ctx.operands[0].shape;
  const std::vector<int64_t>& sizes = ctx.getInts("sizes");
  const std::vector<double>& scales = ctx.getFloats("scales");
  if (in.size() > static_cast<size_t>(kMaxResizeDims))
    return operandShapeError(ctx, 0, "which has more than " + std::to_string(kMaxResizeDims) + " dims");
  if (sizes.size() != in.size())
    return attrError(ctx, "sizes", "needs one value per dim of operand 0");
  for (int64_t d : sizes)
    if (d < 1) return attrError(ctx, "sizes", "has a dim below 1");
  if (!scales.empty() && scales.size() != in.size()) return attrError(ctx, "scales", "needs one value per dim, or none");
  for (double scale : scales)
    if (!(scale > 0)) return attrError(ctx, "scales", "has a scale that is not positive");
  const std::string &mode = ctx.getString("mode"), &coordinates = ctx.getString("coordinate_transformation_mode"),
                    &nearest = ctx.getString("nearest_mode");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return attrError(ctx, "mode", "is \"" + mode + "\", must be nearest, linear or cubic");
  if (ctx.getInt("exclude_outside") != 0 && ctx.getInt("exclude_outside") != 1)
    return attrError(ctx, "exclude_outside", "must be 0 or 1");
  if (coordinates != "half_pixel" && coordinates != "pytorch_half_pixel" && coordinates != "align_corners" &&
      coordinates != "asymmetric" && coordinates != "tf_half_pixel_for_nn" && coordinates != "half_pixel_symmetric")
    return attrError(ctx, "coordinate_transformation_mode",
                     "is \"" + coordinates + "\", must be half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
                     "tf_half_pixel_for_nn or half_pixel_symmetric");
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil")
    return attrError(ctx, "nearest_mode", "is \"" + nearest + "\", must be round_prefer_floor, round_prefer_ceil, floor or ceil");
  return std::vector<TensorType>{{ctx.operands[0].dtype, Shape(sizes.begin(), sizes.end())}};
}

// Each output element reads 2^k inputs (k: the linear dims that change size), 4^k with cubic.
OpCost resizeCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const std::string& mode = ctx.getString("mode");
  const double taps = mode == "linear" ? 2 : mode == "cubic" ? 4 : 1;
  double reads = 1;
  for (size_t d = 0; d < results[0].shape.size(); ++d)
    if (results[0].shape[d] != ctx.operands[0].shape[d]) reads *= taps;
  return {2 * reads * static_cast<double>(results[0].numel()), operandAndResultBytes(ctx, results)};
}

// Dims the resize keeps (same size, scale 1) pass through; resized dims are replicated.
ShardingRule resizeShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const std::vector<double>& scales = ctx.getFloats("scales");
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < static_cast<int>(ctx.operands[0].rank()); ++d) {
    const bool kept = results[0].shape[d] == ctx.operands[0].shape[d] && (scales.empty() || scales[d] == 1.0);
    if (kept) {
      rule.addFactor({d}, {d});
    } else {
      rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
      rule.addResultFactor(0, d, FactorKind::kNeedReplication);
    }
  }
  return rule.build();
}

// dx: dy spread back onto the inputs each output read, with its weights (resize_grad).
Status resizeGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"scales", "mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                                "exclude_outside"});
  attrs.emplace("input_shape", shapeOf(g, g.operand(0)));
  g.operand_grads[0] = g.emit(OpId::resize_grad, {dy(g)}, std::move(attrs));
  return g.status;
}

// resize: each output element is the weighted sum of the inputs it reads.
Expected<std::vector<TensorData>> resizeReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const std::vector<double> in = referenceValues(x);
  const ResizeGeometry g = resizeGeometry(ctx, x.type.shape, ctx.results[0].shape);
  std::vector<double> out(static_cast<size_t>(ctx.results[0].numel()), 0.0);
  for (size_t i = 0; i < out.size(); ++i)
    forEachResizeSource(g, static_cast<int64_t>(i), [&](int64_t offset, double weight) {
      out[i] += weight * in[static_cast<size_t>(offset)];
    });
  return std::vector<TensorData>{referenceTensor(ctx.results[0], out)};
}

}  // namespace

void addConvolutionOps(std::vector<OpDef>& table) {
  table.push_back(OpDef{.id = OpId::conv2d,
                        .name = "conv2d",
                        .summary = "2-D convolution (cross-correlation) over NCHW (or NHWC) with optional bias",
                        .min_operands = 2,
                        .max_operands = 3,
                        .attrs = {optionalInts("strides", {1, 1}), optionalInts("pads", {0, 0, 0, 0}),
                                  optionalInts("dilations", {1, 1}), optionalInt("groups", 1),
                                  optionalString("layout", std::string(kChannelsFirst)), optionalInt("allow_winograd", 0)},
                        .shape = checkedShapeRule<conv2dShape>,
                        .cost = conv2dCost,
                        .sharding = conv2dShardingRule,
                        .weight_operand = 1});
  table.push_back(OpDef{.id = OpId::fused_conv2d,
                        .name = "fused_conv2d",
                        .summary = "conv2d with bias, then + an optional residual, then an activation (none or relu)",
                        .min_operands = 3,
                        .max_operands = 4,
                        .attrs = {optionalInts("strides", {1, 1}), optionalInts("pads", {0, 0, 0, 0}),
                                  optionalInts("dilations", {1, 1}), optionalInt("groups", 1),
                                  optionalString("layout", std::string(kChannelsFirst)),
                                  optionalString("activation", "none"), optionalInt("allow_winograd", 0)},
                        .shape = checkedShapeRule<fusedConv2dShape>,
                        .cost = conv2dCost,
                        .sharding = conv2dShardingRule,
                        .weight_operand = 1});
  table.push_back(poolOp(OpId::max_pool2d, "max_pool2d", "max over kernel windows of NCHW (or NHWC) images", true));
  table.push_back(poolOp(OpId::avg_pool2d, "avg_pool2d", "mean over kernel windows of NCHW images", false));
  table.push_back(OpDef{.id = OpId::global_avg_pool,
                        .name = "global_avg_pool",
                        .summary = "mean over H and W of NCHW images, giving [N,C,1,1]",
                        .attrs = {},
                        .shape = checkedShapeRule<globalAvgPoolShape>,
                        .cost = globalAvgPoolCost,
                        .sharding = globalAvgPoolShardingRule});
  table.push_back(OpDef{.id = OpId::resize,
                        .name = "resize",
                        .summary = "nearest, (multi)linear or (multi)cubic resampling to sizes (ONNX Resize)",
                        .attrs = {requiredAttr("sizes", AttrKind::kInts), optionalFloats("scales", {}),
                                  optionalString("mode", "nearest"),
                                  optionalString("coordinate_transformation_mode", "half_pixel"),
                                  optionalString("nearest_mode", "round_prefer_floor"),
                                  optionalFloat("cubic_coeff_a", -0.75), optionalInt("exclude_outside", 0)},
                        .shape = checkedShapeRule<resizeShape>,
                        .cost = resizeCost,
                        .sharding = resizeShardingRule});
  appendedDef(table, OpId::resize).reference = resizeReference;
  appendedDef(table, OpId::resize).gradient = resizeGradient;
  appendedDef(table, OpId::conv2d).reference = conv2dReference;
  appendedDef(table, OpId::fused_conv2d).reference = fusedConv2dReference;
  appendedDef(table, OpId::max_pool2d).reference = maxPoolReference;
  appendedDef(table, OpId::avg_pool2d).reference = avgPoolReference;
  appendedDef(table, OpId::global_avg_pool).reference = globalAvgPoolReference;
  for (OpId id : {OpId::conv2d, OpId::fused_conv2d, OpId::max_pool2d, OpId::avg_pool2d, OpId::global_avg_pool})
    appendedDef(table, id).reference_supports = referenceDTypes;

  // Gradient rules.
  appendedDef(table, OpId::conv2d).gradient = conv2dGradient;
  appendedDef(table, OpId::max_pool2d).gradient = maxPool2dGradient;
  appendedDef(table, OpId::avg_pool2d).gradient = avgPool2dGradient;
  appendedDef(table, OpId::global_avg_pool).gradient = globalAvgPoolGradient;
}

}  // namespace cleave::ops
