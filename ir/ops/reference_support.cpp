// Building blocks the op families' reference evaluations share (see reference_support.h).
#include "ir/ops/reference_support.h"

#include <cmath>
#include <cstring>

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


// ---- Double-valued helpers ----

namespace {

template <class T>
void writeAs(TensorData& tensor, const std::vector<double>& values, T (*convert)(double)) {
  for (size_t i = 0; i < values.size(); ++i) {
    const T element = convert(values[i]);
    std::memcpy(tensor.bytes.data() + i * sizeof(T), &element, sizeof(T));
  }
}

// Truncation toward zero, wrapping modulo 2^64 (values beyond int64 saturate first).
int64_t toInt64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

}  // namespace

std::vector<double> referenceValues(const TensorData& tensor) {
  return visitDType(tensor.type.dtype, [&]<class T>(T) {
    const std::vector<T> elements = readElements<T>(tensor);
    return std::vector<double>(elements.begin(), elements.end());
  });
}

TensorData referenceTensor(const TensorType& type, const std::vector<double>& values) {
  TensorData tensor{type, std::vector<uint8_t>(static_cast<size_t>(type.bytes()))};
  switch (type.dtype) {
    case DType::kF32: writeAs<float>(tensor, values, [](double v) { return static_cast<float>(v); }); break;
    case DType::kF64: writeAs<double>(tensor, values, [](double v) { return v; }); break;
    case DType::kI64: writeAs<int64_t>(tensor, values, toInt64); break;
    case DType::kI32:
      writeAs<int32_t>(tensor, values, [](double v) { return static_cast<int32_t>(static_cast<uint32_t>(toInt64(v))); });
      break;
    default: writeAs<uint8_t>(tensor, values, [](double v) { return static_cast<uint8_t>(v != 0); }); break;
  }
  return tensor;
}

std::vector<int64_t> unravelIndex(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

int64_t broadcastOffsetOf(const std::vector<int64_t>& index, const Shape& operand) {
  const size_t skip = index.size() - operand.size();
  int64_t offset = 0;
  for (size_t d = 0; d < operand.size(); ++d) offset = offset * operand[d] + (operand[d] == 1 ? 0 : index[d + skip]);
  return offset;
}

AxisSplit splitAroundAxis(const Shape& shape, int64_t axis) {
  AxisSplit split;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) split.outer *= shape[d];
    else if (d == axis) split.length = shape[d];
    else split.inner *= shape[d];
  }
  return split;
}

int64_t poolWindowArgmax(const std::vector<double>& x, const PoolWindow& p) {
  int64_t best = -1, last_nan = -1;
  double max = -INFINITY;
  for (int64_t ih = p.h_first; ih < p.h_last; ++ih)
    for (int64_t iw = p.w_first; iw < p.w_last; ++iw) {
      const int64_t offset = p.plane + ih * p.width + iw;
      if (best < 0) best = offset;
      if (x[offset] > max) {
        max = x[offset];
        best = offset;
      }
      if (x[offset] != x[offset]) last_nan = offset;
    }
  return last_nan >= 0 ? last_nan : best;
}

std::vector<int64_t> readIndices(const TensorData& indices) {
  if (indices.type.dtype != DType::kI32) return readElements<int64_t>(indices);
  const std::vector<int32_t> narrow = readElements<int32_t>(indices);
  return std::vector<int64_t>(narrow.begin(), narrow.end());
}

Expected<std::vector<int64_t>> gatherElementsSources(const Shape& data_shape, const TensorData& indices, int64_t axis) {
  const std::vector<int64_t> rows = readIndices(indices);
  const Shape& index_shape = indices.type.shape;
  const std::vector<int64_t> data_strides = rowMajorStrides(data_shape), index_strides = rowMajorStrides(index_shape);
  std::vector<int64_t> source(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t row = rows[i];
    if (row < -data_shape[axis] || row >= data_shape[axis])
      return Status::badInput("index " + std::to_string(row) + " (element " + std::to_string(i) +
                              " of the indices) is out of range for axis " + std::to_string(axis) + " of size " +
                              std::to_string(data_shape[axis]));
    if (row < 0) row += data_shape[axis];
    int64_t offset = 0;
    for (size_t d = 0; d < index_shape.size(); ++d) {
      const int64_t coordinate = static_cast<int64_t>(i) / index_strides[d] % index_shape[d];
      offset += (static_cast<int64_t>(d) == axis ? row : coordinate) * data_strides[d];
    }
    source[i] = offset;
  }
  return source;
}

Expected<std::vector<int64_t>> gatherNdSources(const Shape& data_shape, const TensorData& indices, int64_t batch_dims) {
  const std::vector<int64_t> tuples = readIndices(indices);
  const Shape& index_shape = indices.type.shape;
  const int64_t k = index_shape.back(), b = batch_dims;
  const std::vector<int64_t> strides = rowMajorStrides(data_shape);
  const int64_t slice = numelOf(Shape(data_shape.begin() + b + k, data_shape.end()));
  const int64_t per_batch = numelOf(Shape(index_shape.begin() + b, index_shape.end() - 1));
  const int64_t rows = static_cast<int64_t>(tuples.size()) / k;
  std::vector<int64_t> source;
  source.reserve(static_cast<size_t>(rows * slice));
  for (int64_t row = 0; row < rows; ++row) {
    // The batch prefix's offset, then each indexed dim's.
    int64_t offset = 0, batch = per_batch > 0 ? row / per_batch : 0;
    for (int64_t d = b - 1; d >= 0; --d) {
      offset += batch % data_shape[d] * strides[d];
      batch /= data_shape[d];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = data_shape[b + j];
      int64_t index = tuples[row * k + j];
      if (index < -dim || index >= dim)
        return Status::badInput("gather_nd: index " + std::to_string(index) + " (element " + std::to_string(row * k + j) +
                                " of the indices) is out of range for dim " + std::to_string(b + j) + " of size " +
                                std::to_string(dim));
      if (index < 0) index += dim;
      offset += index * strides[b + j];
    }
    for (int64_t e = 0; e < slice; ++e) source.push_back(offset + e);
  }
  return source;
}

}  // namespace cleave::ops
