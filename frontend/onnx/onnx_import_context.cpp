// The importer's graph-building state, which every ONNX op converter receives: values, constants, diagnostics.
#include "frontend/onnx/onnx_import_context.h"

#include <cstring>

#include <algorithm>

#include "ir/constant_eval.h"

namespace cleave {

bool hasInput(const onnx::NodeProto& node, int index) {
  return index < node.input_size() && !node.input(index).empty();
}

std::vector<std::string> allInputs(const onnx::NodeProto& node) { return {node.input().begin(), node.input().end()}; }

bool hasOutput(const onnx::NodeProto& node, int index) {
  return index < node.output_size() && !node.output(index).empty();
}

const onnx::AttributeProto* findAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute())
    if (attr.name() == name) return &attr;
  return nullptr;
}
int64_t intAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->i() : fallback;
}
double floatAttr(const onnx::NodeProto& node, const std::string& name, double fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->f() : fallback;
}
std::string stringAttr(const onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->s() : fallback;
}
std::optional<std::vector<int64_t>> intsAttr(const onnx::NodeProto& node, const std::string& name) {
  const auto* attr = findAttr(node, name);
  if (!attr) return std::nullopt;
  return std::vector<int64_t>(attr->ints().begin(), attr->ints().end());
}

SourceLoc OnnxImportContext::locOf(const onnx::NodeProto& node) const {
  std::string name = !node.name().empty()    ? node.name()
                     : node.output_size() > 0 ? node.op_type() + " -> " + node.output(0)
                                              : node.op_type() + " (no output)";
  return SourceLoc{path_, 0, 0, name};
}

std::string OnnxImportContext::where(const onnx::NodeProto& node) const { return locOf(node).str() + ": " + node.op_type(); }

Status OnnxImportContext::nodeError(const onnx::NodeProto& node, const std::string& message) const {
  return Status::badInput(where(node) + ": " + message);
}

Expected<ValueId> OnnxImportContext::valueOf(const onnx::NodeProto& node, const std::string& name) {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = constants_.find(name); it != constants_.end()) {
    auto results = graph_.addNode(OpId::constant, {}, {{"value", it->second}}, locOf(node), {sanitizeOnnxName(name)});
    if (!results) return results.status();
    values_[name] = results->front();
    return results->front();
  }
  if (auto it = transposed_.find(name); it != transposed_.end()) {
    CLEAVE_ASSIGN_OR_RETURN(ValueId source, valueOf(node, it->second));
    auto results = graph_.addNode(OpId::transpose, {source}, {}, locOf(node), {sanitizeOnnxName(name)});
    if (!results) return results.status();
    values_[name] = results->front();
    return results->front();
  }
  if (auto it = parameters_.find(name); it != parameters_.end()) {
    Initializer init;
    init.kind = "data";
    init.data = it->second;
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, graph_.addParam(graph_.uniqueName(sanitizeOnnxName(name)), it->second->type, init,
                                                       /*trainable=*/!buffers_.count(name)));
    values_[name] = v;
    return v;
  }
  return nodeError(node, "input '" + name + "' is not defined before this node");
}

Status OnnxImportContext::addStateUpdate(const onnx::NodeProto& node, const std::string& target,
                                         const std::string& new_value) {
  CLEAVE_ASSIGN_OR_RETURN(ValueId target_value, valueOf(node, target));
  if (!graph_.findParam(target_value)) return nodeError(node, "'" + target + "' is updated but is not an initializer");
  for (const StateUpdate& update : graph_.updates)
    if (update.target == target_value) return nodeError(node, "initializer '" + target + "' is updated twice");
  CLEAVE_ASSIGN_OR_RETURN(ValueId next, valueOf(node, new_value));
  graph_.updates.push_back({target_value, next});
  return Status::ok();
}

Expected<std::vector<std::string>> OnnxImportContext::sequenceOf(const onnx::NodeProto& node,
                                                                 const std::string& name) const {
  if (auto it = sequences_.find(name); it != sequences_.end()) return it->second;
  return nodeError(node, "input '" + name + "' is not a sequence built from tensors earlier in the graph");
}

Expected<TensorType> OnnxImportContext::typeOf(const onnx::NodeProto& node, const std::string& name) {
  if (auto it = values_.find(name); it != values_.end()) return graph_.values[it->second].type;
  if (auto it = constants_.find(name); it != constants_.end()) return it->second->type;
  if (auto it = parameters_.find(name); it != parameters_.end()) return it->second->type;
  return nodeError(node, "input '" + name + "' is not defined before this node");
}

Expected<TensorPtr> OnnxImportContext::constantInput(const onnx::NodeProto& node, int index) {
  const std::string& name = node.input(index);
  if (auto it = constants_.find(name); it != constants_.end()) return it->second;
  if (auto it = parameters_.find(name); it != parameters_.end()) return it->second;
  return nodeError(node, "input " + std::to_string(index) + " ('" + name +
                             "') must be a constant (an initializer, a Constant or computable from static shapes)");
}

Expected<std::vector<int64_t>> OnnxImportContext::constantInts(const onnx::NodeProto& node, int index) {
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, constantInput(node, index));
  if (data->type.dtype != DType::kI64 && data->type.dtype != DType::kI32)
    return nodeError(node, "input " + std::to_string(index) + " must hold integers, not " + data->type.str());
  return tensorInts(*data);
}

Expected<double> OnnxImportContext::constantScalar(const onnx::NodeProto& node, int index) {
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, constantInput(node, index));
  if (data->type.numel() != 1) return nodeError(node, "input " + std::to_string(index) + " must hold one value");
  switch (data->type.dtype) {
    case DType::kF32: return static_cast<double>(data->as<float>()[0]);
    case DType::kF64: return data->as<double>()[0];
    case DType::kI64: return static_cast<double>(data->as<int64_t>()[0]);
    case DType::kI32: return static_cast<double>(data->as<int32_t>()[0]);
    case DType::kI8: return static_cast<double>(data->as<int8_t>()[0]);
    case DType::kU8:
    case DType::kBool: return static_cast<double>(data->as<uint8_t>()[0]);
    case DType::kF16:
    case DType::kBF16: break;
  }
  return nodeError(node, "input " + std::to_string(index) + " has unsupported type " + data->type.str());
}

Status OnnxImportContext::emit(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                          int result_count) {
  if (result_count > node.output_size())
    return nodeError(node, "has " + std::to_string(node.output_size()) + " outputs; it needs " + std::to_string(result_count));
  return emitTo(node, op, inputs, std::move(attrs),
                std::vector<std::string>(node.output().begin(), node.output().begin() + result_count));
}

Status OnnxImportContext::emitTo(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                            const std::vector<std::string>& outputs) {
  const int result_count = static_cast<int>(outputs.size());
  // 1. Fold when every input is a known constant and the constant evaluator handles the op.
  bool all_constant = true;
  std::vector<const TensorData*> constant_operands;
  std::vector<TensorType> operand_types;
  for (const auto& name : inputs) {
    auto it = constants_.find(name);
    if (it == constants_.end()) {
      all_constant = false;
      break;
    }
    constant_operands.push_back(it->second.get());
    operand_types.push_back(it->second->type);
  }
  if (all_constant) {
    auto types = inferResultTypes(opDef(op), operand_types, attrs);
    if (!types) return types.status().withContext(where(node) + ": ");
    bool small = std::all_of(types->begin(), types->end(),
                             [](const TensorType& type) { return checkFoldedShape(type.shape).isOk(); });
    if (small && isConstantEvaluable(op, operand_types, *types)) {
      auto results = evaluateConstantNode(op, attrs, constant_operands, *types);
      if (!results) return results.status().withContext(where(node) + ": ");
      for (int i = 0; i < result_count; ++i)
        bindConstant(outputs[i], std::make_shared<TensorData>(std::move((*results)[i])));
      return Status::ok();
    }
  }
  // 2. Otherwise add a node whose results are named after the ONNX outputs.
  std::vector<ValueId> operands;
  for (const auto& name : inputs) {
    if (export_batch_ > 0) rebatchConstant(name);
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, valueOf(node, name));
    operands.push_back(v);
  }
  if (export_batch_ > 0 && !operands.empty()) rebatchTarget(op, operands[0], attrs);
  std::vector<std::string> names;
  for (int i = 0; i < result_count; ++i) names.push_back(sanitizeOnnxName(outputs[i]));
  auto results = graph_.addNode(op, std::move(operands), std::move(attrs), locOf(node), names);
  if (!results) return results.status();
  for (int i = 0; i < result_count; ++i) values_[outputs[i]] = (*results)[i];
  return Status::ok();
}

Expected<std::vector<ValueId>> OnnxImportContext::emitValues(const onnx::NodeProto& node, OpId op,
                                                        std::vector<ValueId> operands, AttrMap attrs,
                                                        const std::string& result_hint) {
  return graph_.addNode(op, std::move(operands), std::move(attrs), locOf(node), {sanitizeOnnxName(result_hint)});
}

void OnnxImportContext::rebatchConstant(const std::string& name) {
  auto it = constants_.find(name);
  if (it == constants_.end()) return;
  const TensorData& data = *it->second;
  const int64_t batch = options_.batch;
  if (data.type.rank() < 2 || data.type.shape[0] != export_batch_ || batch == export_batch_) return;
  const size_t row = data.bytes.size() / static_cast<size_t>(export_batch_);
  for (int64_t r = 1; r < export_batch_; ++r)
    if (std::memcmp(data.bytes.data(), data.bytes.data() + r * row, row) != 0) return;  // rows differ: not a broadcast
  auto rebatched = std::make_shared<TensorData>();
  rebatched->type = data.type;
  rebatched->type.shape[0] = batch;
  for (int64_t r = 0; r < batch; ++r) rebatched->bytes.insert(rebatched->bytes.end(), data.bytes.begin(), data.bytes.begin() + row);
  it->second = std::move(rebatched);
}

void OnnxImportContext::rebatchTarget(OpId op, ValueId operand, AttrMap& attrs) const {
  if (op != OpId::reshape && op != OpId::expand) return;
  auto shape_attr = attrs.find("shape");
  if (shape_attr == attrs.end()) return;
  auto* shape = std::get_if<std::vector<int64_t>>(&shape_attr->second);
  const Shape& input = graph_.values[operand].type.shape;
  if (!shape || shape->empty() || input.empty() || (*shape)[0] <= 0 || (*shape)[0] % export_batch_ != 0) return;
  // The batch must have reached the operand: its dim 0 counts the new batch's rows (or is 1, broadcast).
  if (input[0] % options_.batch != 0 && input[0] != 1) return;
  (*shape)[0] = (*shape)[0] / export_batch_ * options_.batch;
}

}  // namespace cleave
