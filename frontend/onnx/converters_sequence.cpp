// ONNX converters of tensor sequences (SplitToSequence, SequenceAt, ...): resolved while importing to the tensors they hold.
#include <cstring>

#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// A sequence is a list of tensor names known at import; positions must be constants. torch.export's
// exporter writes torch.split as SplitToSequence and reads the parts back with SequenceAt.

// The sequence position in input `index` (one integer, negative from the end) resolved against `size`
// (`size` itself allowed when `insert`).
Expected<int64_t> position(OnnxImportContext& ctx, const onnx::NodeProto& node, int index, int64_t size, bool insert) {
  CLEAVE_ASSIGN_OR_RETURN(auto values, ctx.constantInts(node, index));
  if (values.size() != 1) return ctx.nodeError(node, "the position must be one integer");
  int64_t at = values[0] < 0 ? values[0] + size : values[0];
  if (at < 0 || at > size || (!insert && at == size))
    return ctx.nodeError(node, "position " + std::to_string(values[0]) + " is out of range for a sequence of " +
                                   std::to_string(size));
  return at;
}

// SplitToSequence: parts of the given sizes (a 1-D split), of one size (a scalar; the last may be
// smaller), or of size 1 (no split; squeezed unless keepdims=1).
Status convertSplitToSequence(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  const int64_t axis = intAttr(node, "axis", 0), normalized = normalizeAxis(axis, x.rank());
  if (normalized < 0) return ctx.nodeError(node, "axis " + std::to_string(axis) + " is out of range for " + x.str());
  const int64_t dim = x.shape[normalized];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr split, ctx.constantInput(node, 1));
    CLEAVE_ASSIGN_OR_RETURN(sizes, ctx.constantInts(node, 1));
    if (split->type.rank() == 0) {
      const int64_t chunk = sizes.at(0);
      if (chunk < 1) return ctx.nodeError(node, "split must be positive");
      sizes.clear();
      for (int64_t done = 0; done < dim; done += chunk) sizes.push_back(std::min(chunk, dim - done));
    }
  } else {
    sizes.assign(static_cast<size_t>(dim), 1);
    squeeze = intAttr(node, "keepdims", 1) == 0;
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < sizes.size(); ++i) parts.push_back(node.output(0) + "/" + std::to_string(i));
  CLEAVE_TRY(ctx.emitTo(node, OpId::split, {node.input(0)}, {{"axis", axis}, {"sizes", sizes}}, parts));
  if (squeeze)
    for (auto& part : parts) {
      std::string squeezed = part + "/squeezed";
      CLEAVE_TRY(ctx.emitTo(node, OpId::squeeze, {part}, {{"axes", std::vector<int64_t>{normalized}}}, {squeezed}));
      part = squeezed;
    }
  ctx.bindSequence(node.output(0), parts);
  return Status::ok();
}

Status convertSequenceAt(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto elements, ctx.sequenceOf(node, node.input(0)));
  CLEAVE_ASSIGN_OR_RETURN(int64_t at, position(ctx, node, 1, static_cast<int64_t>(elements.size()), false));
  return ctx.emit(node, OpId::identity, {elements[at]}, {});
}

Status convertSequenceConstruct(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  ctx.bindSequence(node.output(0), allInputs(node));
  return Status::ok();
}

Status convertSequenceEmpty(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  ctx.bindSequence(node.output(0), {});
  return Status::ok();
}

Status convertSequenceInsert(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto elements, ctx.sequenceOf(node, node.input(0)));
  int64_t at = static_cast<int64_t>(elements.size());
  if (hasInput(node, 2)) {
    CLEAVE_ASSIGN_OR_RETURN(at, position(ctx, node, 2, at, true));
  }
  elements.insert(elements.begin() + at, node.input(1));
  ctx.bindSequence(node.output(0), elements);
  return Status::ok();
}

Status convertSequenceErase(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto elements, ctx.sequenceOf(node, node.input(0)));
  if (elements.empty()) return ctx.nodeError(node, "the sequence is empty");
  int64_t at = static_cast<int64_t>(elements.size()) - 1;
  if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(at, position(ctx, node, 1, static_cast<int64_t>(elements.size()), false));
  }
  elements.erase(elements.begin() + at);
  ctx.bindSequence(node.output(0), elements);
  return Status::ok();
}

Status convertSequenceLength(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto elements, ctx.sequenceOf(node, node.input(0)));
  auto length = std::make_shared<TensorData>();
  length->type = {DType::kI64, {}};
  const int64_t count = static_cast<int64_t>(elements.size());
  length->bytes.resize(sizeof count);
  std::memcpy(length->bytes.data(), &count, sizeof count);
  ctx.bindConstant(node.output(0), length);
  return Status::ok();
}

// ConcatFromSequence: concat along axis, or (new_axis=1) stack along a new axis.
Status convertConcatFromSequence(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto elements, ctx.sequenceOf(node, node.input(0)));
  if (elements.empty()) return ctx.nodeError(node, "the sequence is empty");
  const int64_t axis = intAttr(node, "axis", 0);
  if (intAttr(node, "new_axis", 0) != 0) {
    for (size_t i = 0; i < elements.size(); ++i) {
      std::string unsqueezed = node.output(0) + "/" + std::to_string(i);
      CLEAVE_TRY(ctx.emitTo(node, OpId::unsqueeze, {elements[i]}, {{"axes", std::vector<int64_t>{axis}}}, {unsqueezed}));
      elements[i] = unsqueezed;
    }
  }
  return ctx.emit(node, OpId::concat, elements, {{"axis", axis}});
}

constexpr OnnxConverter kSequenceConverters[] = {
    {"ConcatFromSequence", convertConcatFromSequence},
    {"SequenceAt", convertSequenceAt},
    {"SequenceConstruct", convertSequenceConstruct},
    {"SequenceEmpty", convertSequenceEmpty},
    {"SequenceErase", convertSequenceErase},
    {"SequenceInsert", convertSequenceInsert},
    {"SequenceLength", convertSequenceLength},
    {"SplitToSequence", convertSplitToSequence},
};

}  // namespace

std::span<const OnnxConverter> sequenceConverters() { return kSequenceConverters; }

}  // namespace cleave
