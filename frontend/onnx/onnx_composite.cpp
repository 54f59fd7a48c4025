// Writes one ONNX node as a composition of cleave ops: named intermediate steps, filled constants, the final op.
#include "frontend/onnx/onnx_composite.h"

#include <algorithm>
#include <memory>

namespace cleave {

Expected<OnnxComposite> OnnxComposite::start(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x_type, ctx.typeOf(node, node.input(0)));
  return OnnxComposite(ctx, node, std::move(x_type));
}

std::vector<int64_t> OnnxComposite::spatialAxes() const {
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < rank(); ++d) axes.push_back(d);
  return axes;
}

Expected<std::string> OnnxComposite::apply(OpId op, const std::vector<std::string>& inputs, AttrMap attrs) {
  std::string name = nextName();
  CLEAVE_TRY(ctx_->emitTo(*node_, op, inputs, std::move(attrs), {name}));
  return name;
}

Status OnnxComposite::finish(OpId op, const std::vector<std::string>& inputs, AttrMap attrs) {
  return ctx_->emitTo(*node_, op, inputs, std::move(attrs), {node_->output(0)});
}

Expected<std::string> OnnxComposite::filled(double value, DType dtype, const Shape& shape) {
  CLEAVE_TRY(checkFoldedShape(shape).withContext(ctx_->where(*node_) + ": "));
  // One element converted, then its bytes repeated: no array of doubles as large as the tensor.
  auto element = numbersTensor({value}, dtype, {});
  if (!element) return element.status().withContext(ctx_->where(*node_) + ": ");
  auto data = std::make_shared<TensorData>();
  data->type = {dtype, shape};
  const std::vector<uint8_t>& one = (*element)->bytes;
  data->bytes.resize(static_cast<size_t>(data->type.numel()) * one.size());
  for (size_t at = 0; at < data->bytes.size(); at += one.size()) std::copy(one.begin(), one.end(), data->bytes.begin() + at);
  std::string name = nextName();
  ctx_->bindConstant(name, data);
  return name;
}

Expected<std::string> OnnxComposite::absolute(const std::string& value) {
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype()));
  CLEAVE_ASSIGN_OR_RETURN(std::string is_negative, apply(OpId::less, {value, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string negated, apply(OpId::neg, {value}));
  return apply(OpId::where, {is_negative, negated, value});
}

}  // namespace cleave
