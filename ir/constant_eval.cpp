// Constant evaluation: runs an op's reference (OpDef::reference, in its family file) on constant operands.
#include "ir/constant_eval.h"

#include <string>

namespace cleave {

bool isConstantEvaluable(OpId op, std::span<const TensorType> operand_types, std::span<const TensorType> result_types) {
  const OpDef& def = opDef(op);
  const int n = static_cast<int>(operand_types.size());
  if (!def.constant_foldable || !def.reference) return false;
  if (n < def.min_operands || (def.max_operands >= 0 && n > def.max_operands) || result_types.empty()) return false;
  static const AttrMap kNoAttrs;
  return !def.reference_supports || def.reference_supports(OpContext{def, operand_types, result_types, kNoAttrs});
}

Expected<std::vector<TensorData>> evaluateConstantNode(OpId op, const AttrMap& attrs,
                                                       std::span<const TensorData* const> operands,
                                                       std::span<const TensorType> result_types) {
  // 1. Check that the op's reference handles this node and that each operand's bytes fit its type.
  std::vector<TensorType> operand_types;
  for (const TensorData* operand : operands) operand_types.push_back(operand->type);
  if (!isConstantEvaluable(op, operand_types, result_types))
    return Status::internal("constant evaluation does not support " + std::string(opName(op)) + " on these types");
  for (size_t i = 0; i < operands.size(); ++i)
    if (static_cast<int64_t>(operands[i]->bytes.size()) != operands[i]->type.bytes())
      return Status::badInput(std::string(opName(op)) + ": operand " + std::to_string(i) + " holds " +
                              std::to_string(operands[i]->bytes.size()) + " bytes, its type " +
                              operands[i]->type.str() + " needs " + std::to_string(operands[i]->type.bytes()));
  // 2. Compute.
  const OpDef& def = opDef(op);
  return def.reference(OpContext{def, operand_types, result_types, attrs}, operands);
}

namespace {

// The one-element tensor a constant node makes `v` from, or null.
const TensorData* scalarConstant(const Graph& graph, ValueId v) {
  const Value& value = graph.values[v];
  if (value.producer < 0 || value.type.numel() != 1) return nullptr;
  const Node& node = graph.nodes[value.producer];
  if (node.op != OpId::constant) return nullptr;
  auto attr = node.attrs.find("value");
  if (attr == node.attrs.end() || attrKind(attr->second) != AttrKind::kTensor) return nullptr;
  const auto& data = std::get<std::shared_ptr<const TensorData>>(attr->second);
  return data && data->type.numel() == 1 ? data.get() : nullptr;
}

}  // namespace

std::optional<int64_t> scalarConstantIndex(const Graph& graph, ValueId v) {
  const TensorData* data = scalarConstant(graph, v);
  if (!data) return std::nullopt;
  switch (data->type.dtype) {
    case DType::kI64: return data->as<int64_t>()[0];
    case DType::kI32: return static_cast<int64_t>(data->as<int32_t>()[0]);
    default: return std::nullopt;
  }
}

std::optional<double> scalarConstantValue(const Graph& graph, ValueId v) {
  const TensorData* data = scalarConstant(graph, v);
  if (!data) return std::nullopt;
  switch (data->type.dtype) {
    case DType::kF32: return static_cast<double>(data->as<float>()[0]);
    case DType::kF64: return data->as<double>()[0];
    case DType::kBF16: return static_cast<double>(bfloat16Value(data->as<uint16_t>()[0]));
    default: return std::nullopt;
  }
}

}  // namespace cleave
