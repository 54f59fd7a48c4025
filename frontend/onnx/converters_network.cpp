// ONNX converters of network layers: Gemm, MatMul, Conv, ConvTranspose, pooling, normalisations, Dropout.
#include <algorithm>
#include <cmath>

#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

Status convertGemm(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs{{"alpha", floatAttr(node, "alpha", 1.0)}, {"beta", floatAttr(node, "beta", 1.0)},
                {"transpose_a", intAttr(node, "transA", 0)}, {"transpose_b", intAttr(node, "transB", 0)}};
  std::vector<std::string> inputs = {node.input(0), node.input(1)};
  if (hasInput(node, 2)) inputs.push_back(node.input(2));
  return ctx.emit(node, OpId::gemm, inputs, attrs);
}

// MatMul with numpy's 1-D rules: a 1-D a is a row [1, K] and a 1-D b a column [K, 1], whose unit
// dim the result then loses.
Status convertMatMul(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType a, ctx.typeOf(node, node.input(0)));
  CLEAVE_ASSIGN_OR_RETURN(TensorType b, ctx.typeOf(node, node.input(1)));
  if (a.rank() != 1 && b.rank() != 1) return ctx.emit(node, OpId::matmul, {node.input(0), node.input(1)}, {});
  std::vector<std::string> inputs = {node.input(0), node.input(1)};
  std::vector<int64_t> squeezed;
  if (a.rank() == 1) {
    inputs[0] = node.output(0) + "/row";
    CLEAVE_TRY(ctx.emitTo(node, OpId::unsqueeze, {node.input(0)}, {{"axes", std::vector<int64_t>{0}}}, {inputs[0]}));
    squeezed.push_back(b.rank() == 1 ? 0 : b.rank() - 2);  // a's row dim in the result
  }
  if (b.rank() == 1) {
    inputs[1] = node.output(0) + "/column";
    CLEAVE_TRY(ctx.emitTo(node, OpId::unsqueeze, {node.input(1)}, {{"axes", std::vector<int64_t>{1}}}, {inputs[1]}));
    squeezed.push_back(std::max<int64_t>(a.rank(), 2) - 1);  // b's column dim in the result
  }
  const std::string product = node.output(0) + "/matrix";
  CLEAVE_TRY(ctx.emitTo(node, OpId::matmul, inputs, {}, {product}));
  return ctx.emit(node, OpId::squeeze, {product}, {{"axes", squeezed}});
}

// Attributes shared by Conv, MaxPool and AveragePool over a 2-D window `kernel` (dilated by
// `dilations`) on input `x`: strides (ONNX's default is 1, also for pooling) and pads, explicit or
// resolved from auto_pad (SAME_UPPER / SAME_LOWER put the odd pad at the end / the beginning).
Status windowAttrs(OnnxImportContext& ctx, const onnx::NodeProto& node, const TensorType& x,
                   const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilations, AttrMap& attrs) {
  std::vector<int64_t> strides = intsAttr(node, "strides").value_or(std::vector<int64_t>{1, 1});
  if (strides.size() != 2) return ctx.nodeError(node, "strides must have 2 values");
  attrs["strides"] = strides;
  std::string auto_pad = stringAttr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    if (auto pads = intsAttr(node, "pads")) attrs["pads"] = *pads;
    return Status::ok();
  }
  if (auto_pad == "VALID") return Status::ok();
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return ctx.nodeError(node, "auto_pad '" + auto_pad + "' is not known");
  if (x.rank() != 4) return ctx.nodeError(node, "auto_pad needs a rank-4 input, not " + x.str());
  std::vector<int64_t> pads(4, 0);
  for (int i = 0; i < 2; ++i) {
    int64_t in = x.shape[2 + i], out = (in + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in);
    int64_t smaller = total / 2;
    pads[i] = auto_pad == "SAME_UPPER" ? smaller : total - smaller;
    pads[2 + i] = total - pads[i];
  }
  attrs["pads"] = pads;
  return Status::ok();
}

Status convertConv(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType weight, ctx.typeOf(node, node.input(1)));
  if (weight.rank() != 4)
    return ctx.nodeError(node, "only 1-D and 2-D convolutions are supported (weight is " + weight.str() + ")");
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  std::vector<int64_t> dilations = intsAttr(node, "dilations").value_or(std::vector<int64_t>{1, 1});
  if (dilations.size() != 2) return ctx.nodeError(node, "dilations must have 2 values");
  AttrMap attrs{{"groups", intAttr(node, "group", 1)}, {"dilations", dilations}};
  CLEAVE_TRY(windowAttrs(ctx, node, x, {weight.shape[2], weight.shape[3]}, dilations, attrs));
  std::vector<std::string> inputs = {node.input(0), node.input(1)};
  if (hasInput(node, 2)) inputs.push_back(node.input(2));
  return ctx.emit(node, OpId::conv2d, inputs, attrs);
}

// The transpose of a convolution is its input gradient: conv2d_grad_input with x as dy and the
// output shape from ONNX's rule, padding resolved as for Conv (or from output_shape).
Status convertConvTranspose(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& x_type = c.xType();
  CLEAVE_ASSIGN_OR_RETURN(TensorType weight, ctx.typeOf(node, node.input(1)));
  if (c.rank() != 4 || weight.rank() != 4) return c.fail("only 2-D transposed convolutions are supported");
  int64_t groups = intAttr(node, "group", 1);
  auto pairAttr = [&](const char* name, int64_t fallback) {
    return intsAttr(node, name).value_or(std::vector<int64_t>{fallback, fallback});
  };
  std::vector<int64_t> strides = pairAttr("strides", 1), dilations = pairAttr("dilations", 1);
  std::vector<int64_t> output_padding = pairAttr("output_padding", 0);
  std::vector<int64_t> pads = intsAttr(node, "pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
  auto output_shape = intsAttr(node, "output_shape");
  std::string auto_pad = stringAttr(node, "auto_pad", "NOTSET");
  if (strides.size() != 2 || dilations.size() != 2 || output_padding.size() != 2 || pads.size() != 4)
    return c.fail("strides, dilations and output_padding need 2 values, pads 4");
  std::vector<int64_t> out(2);
  for (int i = 0; i < 2; ++i) {
    int64_t in = x_type.shape[2 + i], extent = (weight.shape[2 + i] - 1) * dilations[i] + 1;
    int64_t full = strides[i] * (in - 1) + output_padding[i] + extent;
    bool resolve = output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (resolve) {
      int64_t target = output_shape ? (*output_shape)[output_shape->size() - 2 + i] : in * strides[i];
      // A target beyond the full extent adds rows at the end that no window reaches (as output_padding).
      int64_t total = std::max<int64_t>(full - target, 0);
      bool upper = auto_pad == "SAME_UPPER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[2 + i] = total - pads[i];
      full = std::max(full, target);
    } else if (auto_pad == "VALID") {
      pads[i] = pads[2 + i] = 0;
    }
    out[i] = full - pads[i] - pads[2 + i];
  }
  AttrMap attrs{{"input_shape", std::vector<int64_t>{x_type.shape[0], weight.shape[1] * groups, out[0], out[1]}},
                {"strides", strides}, {"pads", pads}, {"dilations", dilations}, {"groups", groups}};
  if (!hasInput(node, 2)) return c.finish(OpId::conv2d_grad_input, {c.x(), node.input(1)}, attrs);
  CLEAVE_ASSIGN_OR_RETURN(std::string convolved, c.apply(OpId::conv2d_grad_input, {c.x(), node.input(1)}, attrs));
  CLEAVE_ASSIGN_OR_RETURN(std::string bias,
                          c.apply(OpId::unsqueeze, {node.input(2)}, {{"axes", std::vector<int64_t>{1, 2}}}));
  return c.finish(OpId::add, {convolved, bias});
}

// MaxPool and AveragePool over a 2-D window, without the Indices output or dilations.
template <OpId op>
Status convertPool(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (hasOutput(node, 1)) return ctx.nodeError(node, "the Indices output is not supported");
  auto kernel = intsAttr(node, "kernel_shape");
  if (!kernel || kernel->size() != 2) return ctx.nodeError(node, "only 1-D and 2-D pooling is supported");
  if (auto dilations = intsAttr(node, "dilations"))
    for (int64_t d : *dilations)
      if (d != 1) return ctx.nodeError(node, "pooling dilations other than 1 are not supported");
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  AttrMap attrs{{"kernel", *kernel}, {"ceil_mode", intAttr(node, "ceil_mode", 0)}};
  CLEAVE_TRY(windowAttrs(ctx, node, x, *kernel, {1, 1}, attrs));
  if (op == OpId::avg_pool2d) attrs["count_include_pad"] = intAttr(node, "count_include_pad", 0);
  return ctx.emit(node, op, {node.input(0)}, attrs);
}

// GlobalAveragePool: global_avg_pool on images ([N, C, H, W]); on other ranks (a 1-D one,
// nn.AdaptiveAvgPool1d(1) as Swin-v2's pooler exports it) the mean over the spatial dims.
Status convertGlobalAveragePool(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  if (x.rank() == 4) return ctx.emit(node, OpId::global_avg_pool, {node.input(0)}, {});
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  return c.finish(OpId::reduce_mean, {c.x()}, {{"axes", c.spatialAxes()}, {"keepdims", int64_t{1}}});
}

Status convertGlobalMaxPool(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  return c.finish(OpId::reduce_max, {c.x()}, {{"axes", c.spatialAxes()}, {"keepdims", int64_t{1}}});
}

// x normalised over `axes` (kept as size-1 dims): (x - mean) / sqrt(var + epsilon) with the biased
// variance; the mean and variance steps' names too. InstanceNormalization and training-mode
// BatchNormalization are this over different axes.
struct Normalized {
  std::string normalized, mean, variance;
};
Expected<Normalized> normalizeOver(OnnxComposite& c, std::vector<int64_t> axes, double epsilon) {
  AttrMap kept{{"axes", std::move(axes)}, {"keepdims", int64_t{1}}};
  Normalized n;
  CLEAVE_ASSIGN_OR_RETURN(n.mean, c.apply(OpId::reduce_mean, {c.x()}, kept));
  CLEAVE_ASSIGN_OR_RETURN(std::string centered, c.apply(OpId::sub, {c.x(), n.mean}));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {centered, centered}));
  CLEAVE_ASSIGN_OR_RETURN(n.variance, c.apply(OpId::reduce_mean, {squared}, kept));
  CLEAVE_ASSIGN_OR_RETURN(std::string eps, c.filled(epsilon, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::add, {n.variance, eps}));
  CLEAVE_ASSIGN_OR_RETURN(std::string deviation, c.apply(OpId::sqrt, {shifted}));
  CLEAVE_ASSIGN_OR_RETURN(n.normalized, c.apply(OpId::div, {centered, deviation}));
  return n;
}

// y · scale, and bias, with [C] scale and bias broadcast over x's dims after the channel (dim 1):
// the operands of the final add.
struct ScaledChannels {
  std::string scaled, bias;
};
Expected<ScaledChannels> scaleChannels(OnnxComposite& c, const std::string& y, std::string scale, std::string bias) {
  if (c.rank() > 2) {  // [C] -> [C, 1, ...]
    std::vector<int64_t> trailing;
    for (int64_t d = 1; d < c.rank() - 1; ++d) trailing.push_back(d);
    CLEAVE_ASSIGN_OR_RETURN(scale, c.apply(OpId::unsqueeze, {scale}, {{"axes", trailing}}));
    CLEAVE_ASSIGN_OR_RETURN(bias, c.apply(OpId::unsqueeze, {bias}, {{"axes", trailing}}));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string scaled, c.apply(OpId::mul, {y, scale}));
  return ScaledChannels{scaled, bias};
}

// The batch statistics' form (training_mode=1; before opset 14, a node with more than one output):
// y = (x - mean) / sqrt(var + epsilon) · scale + bias over the batch's mean and biased variance per
// channel, composed of reductions so that it trains through their gradients. Outputs 1 and 2 are
// the new running statistics, running · momentum + batch · (1 - momentum), with the unbiased
// variance as PyTorch keeps it; where the running statistics are initializers they become buffers
// that each step updates, as a PyTorch model in train() mode does.
Status convertBatchNormalizationTraining(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  const std::string &running_mean = node.input(3), &running_var = node.input(4);
  for (const std::string& name : {running_mean, running_var})
    if (ctx.isParameter(name)) ctx.markBuffer(name);
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  if (c.rank() < 2) return c.fail("the input must have a channel dim, not " + c.xType().str());
  std::vector<int64_t> axes = {0};
  for (int64_t d = 2; d < c.rank(); ++d) axes.push_back(d);
  int64_t count = 1;
  for (int64_t d : axes) count *= c.xType().shape[d];
  const double momentum = floatAttr(node, "momentum", 0.9);
  CLEAVE_ASSIGN_OR_RETURN(Normalized n, normalizeOver(c, axes, floatAttr(node, "epsilon", 1e-5)));
  CLEAVE_ASSIGN_OR_RETURN(ScaledChannels scaled, scaleChannels(c, n.normalized, node.input(1), node.input(2)));
  CLEAVE_ASSIGN_OR_RETURN(std::string y, c.apply(OpId::add, {scaled.scaled, scaled.bias}));
  CLEAVE_TRY(ctx.emit(node, OpId::identity, {y}, {}));

  // The running statistics: [C] from the kept [1, C, 1, ...] batch statistics.
  std::vector<int64_t> squeeze = {0};
  squeeze.insert(squeeze.end(), axes.begin() + 1, axes.end());
  CLEAVE_ASSIGN_OR_RETURN(std::string batch_mean, c.apply(OpId::squeeze, {n.mean}, {{"axes", squeeze}}));
  CLEAVE_ASSIGN_OR_RETURN(std::string biased, c.apply(OpId::squeeze, {n.variance}, {{"axes", squeeze}}));
  CLEAVE_ASSIGN_OR_RETURN(std::string bessel, c.filled(count > 1 ? double(count) / double(count - 1) : 1.0, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string unbiased, c.apply(OpId::mul, {biased, bessel}));
  CLEAVE_ASSIGN_OR_RETURN(std::string keep, c.filled(momentum, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string take, c.filled(1.0 - momentum, c.dtype()));
  std::string statistics[2];
  const std::string* batch[2] = {&batch_mean, &unbiased};
  const std::string* running[2] = {&running_mean, &running_var};
  for (int i = 0; i < 2; ++i) {
    CLEAVE_ASSIGN_OR_RETURN(std::string old_part, c.apply(OpId::mul, {*running[i], keep}));
    CLEAVE_ASSIGN_OR_RETURN(std::string new_part, c.apply(OpId::mul, {*batch[i], take}));
    CLEAVE_ASSIGN_OR_RETURN(statistics[i], c.apply(OpId::add, {old_part, new_part}));
    if (hasOutput(node, 1 + i)) CLEAVE_TRY(ctx.emitTo(node, OpId::identity, {statistics[i]}, {}, {node.output(1 + i)}));
    if (ctx.isParameter(*running[i])) CLEAVE_TRY(ctx.addStateUpdate(node, *running[i], statistics[i]));
  }
  return Status::ok();
}

Status convertBatchNormalization(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  const bool training = ctx.opset() >= 14 ? intAttr(node, "training_mode", 0) != 0 : node.output_size() > 1;
  if (training) return convertBatchNormalizationTraining(ctx, node);
  if (node.output_size() > 1) return ctx.nodeError(node, "training_mode=0 with more than one output is not valid ONNX");
  return ctx.emit(node, OpId::batch_norm, {node.input(0), node.input(1), node.input(2), node.input(3), node.input(4)},
                  {{"epsilon", floatAttr(node, "epsilon", 1e-5)}});
}

// LayerNormalization's optional outputs Mean and InvStdDev, from reductions over dims axis..rank-1.
Status layerNormStatistics(OnnxImportContext& ctx, const onnx::NodeProto& node, int64_t axis, double epsilon) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x_type, ctx.typeOf(node, node.input(0)));
  int64_t first = normalizeAxis(axis, x_type.rank());
  if (first < 0) return ctx.nodeError(node, "axis " + std::to_string(axis) + " is out of range for " + x_type.str());
  std::vector<int64_t> axes;
  for (int64_t d = first; d < x_type.rank(); ++d) axes.push_back(d);
  AttrMap reduce{{"axes", axes}, {"keepdims", int64_t{1}}};
  // mean = reduce_mean(x); var = reduce_mean((x - mean)^2); inv_std = 1 / sqrt(var + epsilon). The
  // steps are named <Y>/<step>; Mean and InvStdDev keep their ONNX names (or steps, when unused).
  const std::string& x = node.input(0);
  const std::string step = node.output(0) + "/";
  auto output = [&](int index, const std::string& fallback) {
    return hasOutput(node, index) ? node.output(index) : step + fallback;
  };
  const std::string mean = output(1, "mean"), inv_std = output(2, "inv_std");
  auto epsilon_data = numbersTensor({epsilon}, x_type.dtype, {});
  auto one_data = numbersTensor({1.0}, x_type.dtype, {});
  if (!epsilon_data || !one_data) return ctx.nodeError(node, "no scalar constants of " + x_type.str());
  ctx.bindConstant(step + "epsilon", *epsilon_data);
  ctx.bindConstant(step + "one", *one_data);
  CLEAVE_TRY(ctx.emitTo(node, OpId::reduce_mean, {x}, reduce, {mean}));
  CLEAVE_TRY(ctx.emitTo(node, OpId::sub, {x, mean}, {}, {step + "centered"}));
  CLEAVE_TRY(ctx.emitTo(node, OpId::mul, {step + "centered", step + "centered"}, {}, {step + "squared"}));
  CLEAVE_TRY(ctx.emitTo(node, OpId::reduce_mean, {step + "squared"}, reduce, {step + "variance"}));
  CLEAVE_TRY(ctx.emitTo(node, OpId::add, {step + "variance", step + "epsilon"}, {}, {step + "shifted"}));
  CLEAVE_TRY(ctx.emitTo(node, OpId::sqrt, {step + "shifted"}, {}, {step + "std"}));
  return ctx.emitTo(node, OpId::div, {step + "one", step + "std"}, {}, {inv_std});
}

Status convertLayerNormalization(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (intAttr(node, "stash_type", 1) != 1) return ctx.nodeError(node, "stash_type other than 1 (f32) is not supported");
  std::vector<std::string> inputs = {node.input(0), node.input(1)};
  if (hasInput(node, 2)) inputs.push_back(node.input(2));
  int64_t axis = intAttr(node, "axis", -1);
  double epsilon = floatAttr(node, "epsilon", 1e-5);
  CLEAVE_TRY(ctx.emit(node, OpId::layer_norm, inputs, {{"axis", axis}, {"epsilon", epsilon}}));
  bool wants_statistics = hasOutput(node, 1) || hasOutput(node, 2);
  return wants_statistics ? layerNormStatistics(ctx, node, axis, epsilon) : Status::ok();
}

// RMSNormalization (opset 23): x / sqrt(mean(x²) + epsilon) over the dims from axis on, times scale.
Status convertRmsNormalization(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (intAttr(node, "stash_type", 1) != 1) return ctx.nodeError(node, "stash_type other than 1 (f32) is not supported");
  return ctx.emit(node, OpId::rms_norm, {node.input(0), node.input(1)},
                  {{"axis", intAttr(node, "axis", -1)}, {"epsilon", floatAttr(node, "epsilon", 1e-5)}});
}

// (x - mean) / sqrt(var + epsilon) over the spatial axes, then a per-channel scale and bias.
Status convertInstanceNormalization(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(Normalized n, normalizeOver(c, c.spatialAxes(), floatAttr(node, "epsilon", 1e-5)));
  CLEAVE_ASSIGN_OR_RETURN(ScaledChannels y, scaleChannels(c, n.normalized, node.input(1), node.input(2)));
  return c.finish(OpId::add, {y.scaled, y.bias});
}

// (x - mean) / (sqrt(var) + 1e-9) over its axes (default 0, 2, 3).
Status convertMeanVarianceNormalization(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  AttrMap reduce{{"axes", intsAttr(node, "axes").value_or(std::vector<int64_t>{0, 2, 3})}, {"keepdims", int64_t{1}}};
  CLEAVE_ASSIGN_OR_RETURN(std::string mean, c.apply(OpId::reduce_mean, {c.x()}, reduce));
  CLEAVE_ASSIGN_OR_RETURN(std::string centered, c.apply(OpId::sub, {c.x(), mean}));
  CLEAVE_ASSIGN_OR_RETURN(std::string squared, c.apply(OpId::mul, {centered, centered}));
  CLEAVE_ASSIGN_OR_RETURN(std::string variance, c.apply(OpId::reduce_mean, {squared}, reduce));
  CLEAVE_ASSIGN_OR_RETURN(std::string deviation, c.apply(OpId::sqrt, {variance}));
  CLEAVE_ASSIGN_OR_RETURN(std::string tiny, c.filled(1e-9, c.dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string denominator, c.apply(OpId::add, {deviation, tiny}));
  return c.finish(OpId::div, {centered, denominator});
}

// Inference (training_mode absent or false), or a ratio of 0: the identity, with a mask of ones.
Status convertDropout(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (hasInput(node, 2)) {
    CLEAVE_ASSIGN_OR_RETURN(double training, ctx.constantScalar(node, 2));
    double ratio = 0.5;
    if (hasInput(node, 1)) {
      CLEAVE_ASSIGN_OR_RETURN(ratio, ctx.constantScalar(node, 1));
    }
    if (training != 0 && ratio != 0)
      return ctx.nodeError(node, "training_mode=true with ratio " + std::to_string(ratio) +
                                     " (random dropout) is not supported; export the model in eval mode");
  }
  CLEAVE_TRY(ctx.emit(node, OpId::identity, {node.input(0)}, {}));
  if (hasOutput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
    auto mask = std::make_shared<TensorData>();
    mask->type = {DType::kBool, x.shape};
    mask->bytes.assign(static_cast<size_t>(x.numel()), 1);
    ctx.bindConstant(node.output(1), mask);
  }
  return Status::ok();
}

// Resize (opset 11+): the output shape from the sizes input, or from the scales input (floor(in ·
// scale), the given scales kept for the coordinate transform); opset 18's axes select the dims they
// are given for. Nearest, linear and cubic (PyTorch's bicubic: DINOv2's position embeddings);
// antialiasing and tf_crop_and_resize are refused with an error.
Status convertResize(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  const std::string mode = stringAttr(node, "mode", "nearest");
  const std::string coordinates = stringAttr(node, "coordinate_transformation_mode", "half_pixel");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return ctx.nodeError(node, "mode '" + mode + "' is not supported (nearest, linear and cubic are)");
  if (intAttr(node, "antialias", 0) != 0) return ctx.nodeError(node, "antialias=1 is not supported");
  if (coordinates == "tf_crop_and_resize")
    return ctx.nodeError(node, "coordinate_transformation_mode '" + coordinates + "' is not supported");
  if (stringAttr(node, "keep_aspect_ratio_policy", "stretch") != "stretch")
    return ctx.nodeError(node, "keep_aspect_ratio_policy other than stretch is not supported");
  std::vector<int64_t> axes;
  if (auto given = intsAttr(node, "axes")) {
    for (int64_t a : *given) {
      const int64_t axis = normalizeAxis(a, x.rank());
      if (axis < 0) return ctx.nodeError(node, "axis " + std::to_string(a) + " is out of range for " + x.str());
      axes.push_back(axis);
    }
  } else {
    for (int64_t d = 0; d < x.rank(); ++d) axes.push_back(d);
  }
  std::vector<int64_t> sizes = x.shape;
  std::vector<double> scales;
  // An empty sizes or scales input stands for an absent one (PyTorch's exporters write them).
  auto given_and_filled = [&](int index) -> Expected<bool> {
    if (!hasInput(node, index)) return false;
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, ctx.constantInput(node, index));
    return data->type.numel() > 0;
  };
  CLEAVE_ASSIGN_OR_RETURN(bool has_sizes, given_and_filled(3));
  CLEAVE_ASSIGN_OR_RETURN(bool has_scales, given_and_filled(2));
  if (has_sizes) {
    CLEAVE_ASSIGN_OR_RETURN(auto given, ctx.constantInts(node, 3));
    if (given.size() != axes.size()) return ctx.nodeError(node, "sizes must have one value per resized axis");
    for (size_t i = 0; i < axes.size(); ++i) sizes[axes[i]] = given[i];
  } else if (has_scales) {
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, ctx.constantInput(node, 2));
    if (data->type.dtype != DType::kF32 || data->type.numel() != static_cast<int64_t>(axes.size()))
      return ctx.nodeError(node, "scales must be f32 with one value per resized axis");
    scales.assign(static_cast<size_t>(x.rank()), 1.0);
    for (size_t i = 0; i < axes.size(); ++i) {
      scales[axes[i]] = data->as<float>()[i];
      sizes[axes[i]] = static_cast<int64_t>(std::floor(static_cast<double>(x.shape[axes[i]]) * scales[axes[i]]));
    }
  } else {
    return ctx.nodeError(node, "needs scales or sizes");
  }
  return ctx.emit(node, OpId::resize, {node.input(0)},
                  {{"sizes", sizes}, {"scales", scales}, {"mode", mode}, {"coordinate_transformation_mode", coordinates},
                   {"nearest_mode", stringAttr(node, "nearest_mode", "round_prefer_floor")},
                   {"cubic_coeff_a", floatAttr(node, "cubic_coeff_a", -0.75)},
                   {"exclude_outside", intAttr(node, "exclude_outside", 0)}});
}

// A 1-D window op (Conv, ConvTranspose, MaxPool, AveragePool on [N, C, L]) as its 2-D form on
// [N, C, 1, L]: the input and weight get a unit dim 2, every window attribute a leading 1 (pads a
// 0 per side), and the 2-D result loses dim 2 again. Whisper's and wav2vec's convolutions are 1-D.
Status convertAs2d(OnnxImportContext& ctx, const onnx::NodeProto& node, OnnxConvertFn convert2d) {
  onnx::NodeProto flat = node;
  const std::string step = node.output(0) + "/2d";
  const AttrMap unit_dim{{"axes", std::vector<int64_t>{2}}};
  for (int i = 0; i < std::min(node.input_size(), 2); ++i) {  // x, and the weight of a convolution
    if (!hasInput(node, i)) continue;
    flat.set_input(i, step + "/input" + std::to_string(i));
    CLEAVE_TRY(ctx.emitTo(node, OpId::unsqueeze, {node.input(i)}, unit_dim, {flat.input(i)}));
  }
  for (auto& attr : *flat.mutable_attribute()) {
    const std::string& name = attr.name();
    if (name != "kernel_shape" && name != "strides" && name != "dilations" && name != "pads" &&
        name != "output_padding" && name != "output_shape")
      continue;
    std::vector<int64_t> values(attr.ints().begin(), attr.ints().end());
    if (name == "pads") {
      if (values.size() != 2) return ctx.nodeError(node, "pads must have 2 values for a 1-D window");
      values = {0, values[0], 0, values[1]};
    } else {
      values.insert(values.begin(), name == "output_padding" ? 0 : 1);
    }
    attr.clear_ints();
    for (int64_t v : values) attr.add_ints(v);
  }
  flat.set_output(0, step);
  flat.set_name(node.name());
  CLEAVE_TRY(convert2d(ctx, flat));
  return ctx.emit(node, OpId::squeeze, {step}, unit_dim);
}

// A 3-D window op (Conv, MaxPool, AveragePool on [N, C, D, H, W]) as 2-D ones over its depth taps:
// for each kernel depth position kd, the input depths it reads (a strided slice of the depth-padded
// input) are moved into the batch, [N·Do, C, H, W], and go through the 2-D op (a convolution with
// weight[:, :, kd]); the taps are summed (conv), maxed (MaxPool) or averaged (AveragePool), and
// [N·Do, O, Ho, Wo] goes back to [N, O, Do, Ho, Wo]. Trains through the 2-D ops' gradients.
Status convertAs3d(OnnxImportContext& ctx, const onnx::NodeProto& node, OnnxConvertFn convert2d) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const Shape x = c.xType().shape;
  const bool conv = node.op_type() == "Conv", max_pool = node.op_type() == "MaxPool";
  if (stringAttr(node, "auto_pad", "NOTSET") != "NOTSET" && stringAttr(node, "auto_pad", "NOTSET") != "VALID")
    return c.fail("auto_pad SAME_UPPER/SAME_LOWER is not supported for 3-D windows");
  if (hasOutput(node, 1)) return c.fail("the Indices output is not supported");
  int64_t kernel_d = 0;
  if (conv) {
    CLEAVE_ASSIGN_OR_RETURN(TensorType w, ctx.typeOf(node, node.input(1)));
    kernel_d = w.shape[2];
  } else {
    auto kernel = intsAttr(node, "kernel_shape");
    if (!kernel || kernel->size() != 3) return c.fail("kernel_shape must have 3 values");
    kernel_d = (*kernel)[0];
  }
  auto triple = [&](const char* name, int64_t fallback) {
    return intsAttr(node, name).value_or(std::vector<int64_t>{fallback, fallback, fallback});
  };
  const std::vector<int64_t> strides = triple("strides", 1), dilations = triple("dilations", 1);
  std::vector<int64_t> pads = intsAttr(node, "pads").value_or(std::vector<int64_t>(6, 0));
  if (stringAttr(node, "auto_pad", "NOTSET") == "VALID") pads.assign(6, 0);
  if (strides.size() != 3 || dilations.size() != 3 || pads.size() != 6)
    return c.fail("strides and dilations need 3 values, pads 6");
  if (!conv && (pads[0] != 0 || pads[3] != 0 || intAttr(node, "ceil_mode", 0) != 0))
    return c.fail("3-D pooling with depth padding or ceil_mode is not supported");
  // 1. Depth padding (zeros: convolutions only).
  std::string input = c.x();
  int64_t depth = x[2];
  if (pads[0] > 0 || pads[3] > 0) {
    std::vector<std::string> parts;
    for (int side = 0; side < 2; ++side) {
      const int64_t count = pads[side * 3];
      if (side == 1) parts.push_back(input);
      if (count == 0) continue;
      CLEAVE_ASSIGN_OR_RETURN(std::string block, c.filled(0, c.dtype(), Shape{x[0], x[1], count, x[3], x[4]}));
      parts.push_back(block);
    }
    CLEAVE_ASSIGN_OR_RETURN(input, c.apply(OpId::concat, parts, {{"axis", int64_t{2}}}));
    depth += pads[0] + pads[3];
  }
  const int64_t out_depth = (depth - dilations[0] * (kernel_d - 1) - 1) / strides[0] + 1;
  if (out_depth < 1) return c.fail("the kernel's depth does not fit the input " + c.xType().str());
  // 2. The 2-D node every tap runs: this node's attributes without their depth values.
  onnx::NodeProto flat = node;
  for (auto& attr : *flat.mutable_attribute()) {
    const std::string& name = attr.name();
    if (name != "kernel_shape" && name != "strides" && name != "dilations" && name != "pads") continue;
    std::vector<int64_t> values(attr.ints().begin(), attr.ints().end());
    if (name == "pads") values = {values[1], values[2], values[4], values[5]};
    else values.erase(values.begin());
    attr.clear_ints();
    for (int64_t v : values) attr.add_ints(v);
  }
  if (conv && flat.input_size() > 2) flat.mutable_input()->RemoveLast();  // the bias is added once, below
  std::vector<std::string> taps;
  for (int64_t kd = 0; kd < kernel_d; ++kd) {
    const int64_t first = kd * dilations[0];
    CLEAVE_ASSIGN_OR_RETURN(std::string sliced,
                            c.apply(OpId::slice, {input}, {{"starts", std::vector<int64_t>{first}},
                                                           {"ends", std::vector<int64_t>{first + (out_depth - 1) * strides[0] + 1}},
                                                           {"axes", std::vector<int64_t>{2}},
                                                           {"steps", std::vector<int64_t>{strides[0]}}}));
    CLEAVE_ASSIGN_OR_RETURN(std::string moved, c.apply(OpId::transpose, {sliced}, {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}}));
    CLEAVE_ASSIGN_OR_RETURN(std::string batched,
                            c.apply(OpId::reshape, {moved}, {{"shape", std::vector<int64_t>{x[0] * out_depth, x[1], x[3], x[4]}}}));
    flat.set_input(0, batched);
    if (conv) {
      CLEAVE_ASSIGN_OR_RETURN(std::string weight_slice,
                              c.apply(OpId::slice, {node.input(1)}, {{"starts", std::vector<int64_t>{kd}},
                                                                     {"ends", std::vector<int64_t>{kd + 1}},
                                                                     {"axes", std::vector<int64_t>{2}}}));
      CLEAVE_ASSIGN_OR_RETURN(std::string weight, c.apply(OpId::squeeze, {weight_slice}, {{"axes", std::vector<int64_t>{2}}}));
      flat.set_input(1, weight);
    }
    flat.set_output(0, node.output(0) + "/tap" + std::to_string(kd));
    CLEAVE_TRY(convert2d(ctx, flat));
    taps.push_back(flat.output(0));
  }
  // 3. Combine the taps, add the bias, and restore [N, O, Do, Ho, Wo].
  std::string combined = taps[0];
  for (size_t i = 1; i < taps.size(); ++i) {
    if (max_pool) {
      CLEAVE_ASSIGN_OR_RETURN(std::string keep, c.apply(OpId::greater_equal, {combined, taps[i]}));
      CLEAVE_ASSIGN_OR_RETURN(combined, c.apply(OpId::where, {keep, combined, taps[i]}));
    } else {
      CLEAVE_ASSIGN_OR_RETURN(combined, c.apply(OpId::add, {combined, taps[i]}));
    }
  }
  if (!conv && !max_pool && kernel_d > 1) {
    CLEAVE_ASSIGN_OR_RETURN(std::string count, c.filled(static_cast<double>(kernel_d), c.dtype()));
    CLEAVE_ASSIGN_OR_RETURN(combined, c.apply(OpId::div, {combined, count}));
  }
  if (conv && hasInput(node, 2)) {
    CLEAVE_ASSIGN_OR_RETURN(std::string bias, c.apply(OpId::unsqueeze, {node.input(2)}, {{"axes", std::vector<int64_t>{1, 2}}}));
    CLEAVE_ASSIGN_OR_RETURN(combined, c.apply(OpId::add, {combined, bias}));
  }
  CLEAVE_ASSIGN_OR_RETURN(TensorType planes, ctx.typeOf(node, combined));
  CLEAVE_ASSIGN_OR_RETURN(std::string split,
                          c.apply(OpId::reshape, {combined}, {{"shape", std::vector<int64_t>{x[0], out_depth, planes.shape[1],
                                                                                            planes.shape[2], planes.shape[3]}}}));
  return c.finish(OpId::transpose, {split}, {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}});
}

// The rank of input `index` (x: 3 for a 1-D window op, 4 for 2-D).
Expected<int64_t> rankOf(OnnxImportContext& ctx, const onnx::NodeProto& node, int index) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType type, ctx.typeOf(node, node.input(index)));
  return type.rank();
}

template <OnnxConvertFn convert2d>
Status convertWindow(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(int64_t rank, rankOf(ctx, node, 0));
  if (rank == 3) return convertAs2d(ctx, node, convert2d);
  if (rank == 5 && node.op_type() != "ConvTranspose") return convertAs3d(ctx, node, convert2d);
  if (rank != 4)
    return ctx.nodeError(node, "only 1-D, 2-D and (but ConvTranspose) 3-D windows are supported (the input has rank " +
                                   std::to_string(rank) + ")");
  return convert2d(ctx, node);
}

constexpr OnnxConverter kNetworkConverters[] = {
    {"AveragePool", convertWindow<convertPool<OpId::avg_pool2d>>},
    {"BatchNormalization", convertBatchNormalization},
    {"Conv", convertWindow<convertConv>},
    {"ConvTranspose", convertWindow<convertConvTranspose>},
    {"Dropout", convertDropout},
    {"Gemm", convertGemm},
    {"GlobalAveragePool", convertGlobalAveragePool},
    {"GlobalMaxPool", convertGlobalMaxPool},
    {"InstanceNormalization", convertInstanceNormalization},
    {"LayerNormalization", convertLayerNormalization},
    {"MatMul", convertMatMul},
    {"MaxPool", convertWindow<convertPool<OpId::max_pool2d>>},
    {"MeanVarianceNormalization", convertMeanVarianceNormalization},
    {"RMSNormalization", convertRmsNormalization, 23},
    {"Resize", convertResize},
};

}  // namespace

std::span<const OnnxConverter> networkConverters() { return kNetworkConverters; }

}  // namespace cleave
