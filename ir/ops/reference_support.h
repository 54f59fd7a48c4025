// Building blocks the op families' reference evaluations share: element access, dtype dispatch, index arithmetic.
//
// A reference (OpDef::reference, next to its op in ir/ops/<family>.cpp) computes an op's results
// from operand tensors, following docs/ops.md. The references here handle f32, f64, i64, i32 and
// bool (stored as one byte: uint8_t); integers wrap around on overflow (two's complement) instead
// of invoking undefined behaviour. Data movement is written as "result element i reads operand
// element source[i]", which keeps every op's index rule in one short function.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/op_table.h"

namespace cleave::ops {

// ---- Registration ----

// Sets `id`'s reference and the rule saying which dtypes it handles, and lets constant folding
// compute `id` with it (OpDef::constant_foldable).
void setFoldingReference(std::vector<OpDef>& table, OpId id, ReferenceRule reference, ReferenceSupportRule supports);

// ---- Dtype acceptance (ReferenceSupportRule) ----

// Every operand and result is f32, f64, i64, i32 or bool.
bool referenceDTypes(const OpContext& ctx);
// As referenceDTypes, and operand 0 is a number (f32, f64, i64, i32).
bool referenceNumeric(const OpContext& ctx);
// As referenceDTypes, and operand 0 is f32 or f64.
bool referenceFloat(const OpContext& ctx);

// ---- Elements ----

// The elements of `tensor` as T (a copy).
template <class T>
std::vector<T> readElements(const TensorData& tensor) {
  std::vector<T> elements(static_cast<size_t>(tensor.type.numel()));
  if (!elements.empty()) std::memcpy(elements.data(), tensor.bytes.data(), elements.size() * sizeof(T));
  return elements;
}

// A tensor of `type` holding `elements`.
template <class T>
TensorData makeTensor(const TensorType& type, const std::vector<T>& elements) {
  TensorData tensor{type, std::vector<uint8_t>(elements.size() * sizeof(T))};
  if (!elements.empty()) std::memcpy(tensor.bytes.data(), elements.data(), tensor.bytes.size());
  return tensor;
}

// Calls fn(T{}) with the C++ element type of `dtype`; only the dtypes referenceDTypes accepts.
template <class Fn>
auto visitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    default: return fn(uint8_t{});  // kBool
  }
}

// a + b, a - b and a · b wrapping around for integers.
template <class T>
T wrappingAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <class T>
T wrappingSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <class T>
T wrappingMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// a + b: plain for floats, wrapping for integers.
template <class T>
T addElements(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a + b;
  else return wrappingAdd(a, b);
}

// ---- Index arithmetic ----

// Product of `shape`'s dims.
int64_t numelOf(const Shape& shape);
// Row-major strides (in elements) of `shape`.
std::vector<int64_t> rowMajorStrides(const Shape& shape);
// base + Σ idx[d]·strides[d] for every multi-index idx of `shape`, in row-major order.
std::vector<int64_t> stridedIndices(const Shape& shape, const std::vector<int64_t>& strides, int64_t base = 0);
// For every element of `out_shape`, the element of `in_shape` it reads under numpy broadcasting.
std::vector<int64_t> broadcastSourceIndices(const Shape& in_shape, const Shape& out_shape);
// A tensor of `type` whose element i is element source[i] of `input`, or zero where source[i] < 0.
TensorData selectElements(const TensorData& input, const TensorType& type, const std::vector<int64_t>& source);

// ---- Results and errors ----

// "<op>: <message>" (kBadInput): bad data, such as an out-of-range index.
Status referenceError(const OpContext& ctx, const std::string& message);
// The one-result vector holding `value`, or its error.
Expected<std::vector<TensorData>> single(Expected<TensorData> value);
// The reference of ops that only relabel the shape (identity, reshape, flatten, squeeze,
// unsqueeze): operand 0's bytes under the result type.
Expected<std::vector<TensorData>> sameBytesReference(const OpContext& ctx, std::span<const TensorData* const> operands);

}  // namespace cleave::ops
