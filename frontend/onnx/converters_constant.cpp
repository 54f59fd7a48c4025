// ONNX converters whose results are constants: Constant, Shape, Size, ConstantOfShape, Range, EyeLike.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

Status convertConstant(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (const auto* value = findAttr(node, "value")) {
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, tensorFromOnnx(value->t(), ctx.path()));
    ctx.bindConstant(node.output(0), data);
  } else if (const auto* ints = findAttr(node, "value_ints")) {
    ctx.bindConstant(node.output(0), intsTensor({ints->ints().begin(), ints->ints().end()}));
  } else if (const auto* one_int = findAttr(node, "value_int")) {
    ctx.bindConstant(node.output(0), intsTensor({one_int->i()}, /*scalar=*/true));
  } else if (const auto* one_float = findAttr(node, "value_float")) {
    auto data = std::make_shared<TensorData>();
    data->type = {DType::kF32, {}};
    float f = one_float->f();
    data->bytes.resize(sizeof f);
    std::memcpy(data->bytes.data(), &f, sizeof f);
    ctx.bindConstant(node.output(0), data);
  } else {
    return ctx.nodeError(node, "only the value, value_int, value_ints and value_float forms are supported");
  }
  return Status::ok();
}

// The input's static dims start..end-1 (clamped to the rank, negative counting from the end).
Status convertShape(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  int64_t rank = x.rank();
  auto clampIndex = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
  int64_t start = clampIndex(intAttr(node, "start", 0)), end = clampIndex(intAttr(node, "end", rank));
  std::vector<int64_t> dims(x.shape.begin() + start, x.shape.begin() + std::max(start, end));
  ctx.bindConstant(node.output(0), intsTensor(dims));
  return Status::ok();
}

Status convertSize(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  ctx.bindConstant(node.output(0), intsTensor({c.xType().numel()}, /*scalar=*/true));
  return Status::ok();
}

// A 2-D tensor of the input's shape with ones on diagonal k, of the dtype attribute (else the input's).
Status convertEyeLike(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& x_type = c.xType();
  if (c.rank() != 2) return c.fail("the input must be 2-D, not " + x_type.str());
  DType eye_dtype = c.dtype();
  if (const auto* to = findAttr(node, "dtype")) {
    auto converted = dtypeFromOnnx(static_cast<int32_t>(to->i()));
    if (!converted) return c.fail("dtype " + std::to_string(to->i()) + " is not supported");
    eye_dtype = *converted;
  }
  int64_t k = intAttr(node, "k", 0);
  CLEAVE_TRY(checkFoldedShape(x_type.shape).withContext(ctx.where(node) + ": "));
  std::vector<double> values(static_cast<size_t>(x_type.numel()), 0.0);
  for (int64_t i = 0; i < x_type.shape[0]; ++i)
    if (i + k >= 0 && i + k < x_type.shape[1]) values[static_cast<size_t>(i * x_type.shape[1] + i + k)] = 1;
  auto eye = numbersTensor(values, eye_dtype, x_type.shape);
  if (!eye) return eye.status().withContext(ctx.where(node) + ": ");
  ctx.bindConstant(node.output(0), *eye);
  return Status::ok();
}

// Folded: a tensor of the (constant) shape filled with `value` (default f32 0).
Status convertConstantOfShape(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto shape, ctx.constantInts(node, 0));
  TensorPtr fill;
  if (const auto* value = findAttr(node, "value")) {
    CLEAVE_ASSIGN_OR_RETURN(fill, tensorFromOnnx(value->t(), ctx.path()));
  } else {
    auto zero = std::make_shared<TensorData>();
    zero->type = {DType::kF32, {1}};
    zero->bytes.assign(sizeof(float), 0);
    fill = zero;
  }
  if (fill->type.numel() != 1) return ctx.nodeError(node, "value must hold one element");
  CLEAVE_TRY(checkFoldedShape(shape).withContext(ctx.where(node) + ": "));
  auto data = std::make_shared<TensorData>();
  data->type = {fill->type.dtype, shape};
  for (int64_t i = 0; i < data->type.numel(); ++i)
    data->bytes.insert(data->bytes.end(), fill->bytes.begin(), fill->bytes.end());
  ctx.bindConstant(node.output(0), data);
  return Status::ok();
}

// Folded: start, limit and delta are constant scalars; ONNX's count is max(ceil((limit-start)/delta), 0).
Status convertRange(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr start_data, ctx.constantInput(node, 0));
  CLEAVE_ASSIGN_OR_RETURN(double start, ctx.constantScalar(node, 0));
  CLEAVE_ASSIGN_OR_RETURN(double limit, ctx.constantScalar(node, 1));
  CLEAVE_ASSIGN_OR_RETURN(double delta, ctx.constantScalar(node, 2));
  if (delta == 0) return ctx.nodeError(node, "delta must be non-zero");
  double elements = std::max(std::ceil((limit - start) / delta), 0.0);
  if (!(elements <= static_cast<double>(kMaxFoldedElements))) {  // also NaN
    char count[32];
    std::snprintf(count, sizeof count, "%g", elements);
    return ctx.nodeError(node, std::string("start, limit and delta give ") + count + " elements, over cleave's limit of " +
                                   std::to_string(kMaxFoldedElements));
  }
  auto count = static_cast<int64_t>(elements);
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = start + static_cast<double>(i) * delta;
  auto range = numbersTensor(values, start_data->type.dtype, {count});
  if (!range) return range.status().withContext(ctx.where(node) + ": ");
  ctx.bindConstant(node.output(0), *range);
  return Status::ok();
}

constexpr OnnxConverter kConstantConverters[] = {
    {"Constant", convertConstant},
    {"ConstantOfShape", convertConstantOfShape},
    {"EyeLike", convertEyeLike},
    {"Range", convertRange},
    {"Shape", convertShape},
    {"Size", convertSize},
};

}  // namespace

std::span<const OnnxConverter> constantConverters() { return kConstantConverters; }

}  // namespace cleave
