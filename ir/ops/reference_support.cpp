// Building blocks the op families' reference evaluations share (see reference_support.h).
#include "ir/ops/reference_support.h"

#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

bool isReferenceDType(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kI64 || d == DType::kI32 || d == DType::kBool;
}

// Operand 0's dtype (bool when there is none).
DType firstOperandDType(const OpContext& ctx) { return ctx.operands.empty() ? DType::kBool : ctx.operands[0].dtype; }

}  // namespace

void setFoldingReference(std::vector<OpDef>& table, OpId id, ReferenceRule reference, ReferenceSupportRule supports) {
  OpDef& def = appendedDef(table, id);
  def.reference = reference;
  def.reference_supports = supports;
  def.constant_foldable = true;
}

bool referenceDTypes(const OpContext& ctx) {
  for (const auto& types : {ctx.operands, ctx.results})
    for (const TensorType& t : types)
      if (!isReferenceDType(t.dtype)) return false;
  return true;
}

bool referenceNumeric(const OpContext& ctx) {
  const DType d = firstOperandDType(ctx);
  return referenceDTypes(ctx) && (d == DType::kF32 || d == DType::kF64 || d == DType::kI64 || d == DType::kI32);
}

bool referenceFloat(const OpContext& ctx) {
  const DType d = firstOperandDType(ctx);
  return referenceDTypes(ctx) && (d == DType::kF32 || d == DType::kF64);
}

int64_t numelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> rowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

std::vector<int64_t> stridedIndices(const Shape& shape, const std::vector<int64_t>& strides, int64_t base) {
  const int64_t count = numelOf(shape);
  std::vector<int64_t> source(static_cast<size_t>(count));
  std::vector<int64_t> index(shape.size(), 0);
  int64_t position = base;
  for (int64_t i = 0; i < count; ++i) {
    source[i] = position;
    for (size_t d = shape.size(); d-- > 0;) {  // odometer step from the last dimension
      if (++index[d] < shape[d]) {
        position += strides[d];
        break;
      }
      position -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
  return source;
}

std::vector<int64_t> broadcastSourceIndices(const Shape& in_shape, const Shape& out_shape) {
  const size_t offset = out_shape.size() - in_shape.size();
  const std::vector<int64_t> in_strides = rowMajorStrides(in_shape);
  std::vector<int64_t> strides(out_shape.size(), 0);  // broadcast dims read the same element
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (in_shape[d] != 1) strides[d + offset] = in_strides[d];
  return stridedIndices(out_shape, strides);
}

TensorData selectElements(const TensorData& input, const TensorType& type, const std::vector<int64_t>& source) {
  const size_t size = static_cast<size_t>(dtypeSize(type.dtype));
  TensorData out{type, std::vector<uint8_t>(source.size() * size, 0)};
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] >= 0) std::memcpy(out.bytes.data() + i * size, input.bytes.data() + source[i] * size, size);
  return out;
}

Status referenceError(const OpContext& ctx, const std::string& message) {
  return Status::badInput(std::string(ctx.def.name) + ": " + message);
}

Expected<std::vector<TensorData>> single(Expected<TensorData> value) {
  if (!value) return value.status();
  return std::vector<TensorData>{std::move(*value)};
}

Expected<std::vector<TensorData>> sameBytesReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  return std::vector<TensorData>{TensorData{ctx.results[0], operands[0]->bytes}};  // same elements, new shape
}

}  // namespace cleave::ops
