// Building blocks the op families' reference evaluations share: element access, dtype dispatch, index arithmetic, and double-valued loops (convolution taps, pool windows).
//
// A reference (OpDef::reference, next to its op in ir/ops/<family>.cpp) computes an op's results
// from operand tensors, following docs/ops.md. The references here handle f32, f64, i64, i32 and
// bool (stored as one byte: uint8_t); integers wrap around on overflow (two's complement) instead
// of invoking undefined behaviour. Data movement is written as "result element i reads operand
// element source[i]", which keeps every op's index rule in one short function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/attribute.h"
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

// Index operands (i64, or i32 widened) as int64 values.
std::vector<int64_t> readIndices(const TensorData& indices);

// gather_nd's addressing: for every result element, the offset of the data element it reads (data of
// `data_shape`; integer `indices`, negative ones counting from the end); kBadInput for an index out of range.
// gather_nd_grad adds into the same places.
Expected<std::vector<int64_t>> gatherNdSources(const Shape& data_shape, const TensorData& indices, int64_t batch_dims);

// gather_elements' addressing: for every index element, the offset of the data element it reads
// (its coordinates with the `axis` one replaced by the index, negative from the end); kBadInput for
// an index out of range. gather_elements_grad and scatter_elements use the same places.
Expected<std::vector<int64_t>> gatherElementsSources(const Shape& data_shape, const TensorData& indices, int64_t axis);

// ---- Results and errors ----

// "<op>: <message>" (kBadInput): bad data, such as an out-of-range index.
Status referenceError(const OpContext& ctx, const std::string& message);
// The one-result vector holding `value`, or its error.
Expected<std::vector<TensorData>> single(Expected<TensorData> value);
// The reference of ops that only relabel the shape (identity, reshape, flatten, squeeze,
// unsqueeze): operand 0's bytes under the result type.
Expected<std::vector<TensorData>> sameBytesReference(const OpContext& ctx, std::span<const TensorData* const> operands);


// ---- Double-valued helpers (the references of matmul, convolutions, pools, norms, losses, ...) ----

// The elements of `tensor` as doubles (the dtypes referenceDTypes accepts).
std::vector<double> referenceValues(const TensorData& tensor);
// A tensor of `type` holding `values` converted to its dtype (integers truncate toward zero and wrap).
TensorData referenceTensor(const TensorType& type, const std::vector<double>& values);
// The row-major multi-index of element `flat` of `shape`.
std::vector<int64_t> unravelIndex(int64_t flat, const Shape& shape);
// The flat offset in `operand` (numpy-broadcast against a result of rank index.size()) of the result
// element at `index`.
int64_t broadcastOffsetOf(const std::vector<int64_t>& index, const Shape& operand);

// The rows × axis × inner decomposition of `shape` around `axis` (for per-axis ops such as softmax).
struct AxisSplit {
  int64_t outer = 1, length = 1, inner = 1;
};
// `shape` split around the normalised `axis`.
AxisSplit splitAroundAxis(const Shape& shape, int64_t axis);

// Calls tap(y, x, w) for every multiply-add of conv2d (NCHW x, OIHW w, result y of shape `y_shape`),
// with the flat offsets of the output, input and weight elements; padded taps are skipped.
template <class Tap>
void forEachConvTap(const Shape& x_shape, const Shape& w_shape, const Shape& y_shape, const OpContext& ctx, Tap&& tap) {
  const std::vector<int64_t>& strides = ctx.getInts("strides");
  const std::vector<int64_t>& pads = ctx.getInts("pads");
  const std::vector<int64_t>& dilations = ctx.getInts("dilations");
  const int64_t groups = ctx.getInt("groups");
  const int64_t channels = x_shape[1], height = x_shape[2], width = x_shape[3];
  const int64_t cg = channels / groups, og = w_shape[0] / groups, kh = w_shape[2], kw = w_shape[3];
  const int64_t count = y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3];
  for (int64_t y = 0; y < count; ++y) {
    const std::vector<int64_t> idx = unravelIndex(y, y_shape);  // n, o, oh, ow
    const int64_t g = idx[1] / og;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t ki = 0; ki < kh; ++ki)
        for (int64_t kj = 0; kj < kw; ++kj) {
          const int64_t ih = idx[2] * strides[0] - pads[0] + ki * dilations[0];
          const int64_t iw = idx[3] * strides[1] - pads[1] + kj * dilations[1];
          if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
          tap(y, ((idx[0] * channels + g * cg + ci) * height + ih) * width + iw, ((idx[1] * cg + ci) * kh + ki) * kw + kj);
        }
  }
}

// One pooling window of an NCHW input, as PyTorch defines it: [h_first, h_last) × [w_first, w_last)
// inside the image, and `padded_count` elements inside the padded image (count_include_pad's divisor).
struct PoolWindow {
  int64_t plane = 0;  // offset of the window's N·C plane in the input
  int64_t h_first = 0, h_last = 0, w_first = 0, w_last = 0;
  int64_t padded_count = 0;
  int64_t width = 0;  // input width, for offsets plane + ih·width + iw
};

// Calls window(y, PoolWindow) for every output element y of a pool (attributes kernel, strides, pads).
template <class Visit>
void forEachPoolWindow(const Shape& x_shape, const Shape& y_shape, const OpContext& ctx, Visit&& window) {
  const std::vector<int64_t>& kernel = ctx.getInts("kernel");
  const std::vector<int64_t>& strides = ctx.getInts("strides").empty() ? kernel : ctx.getInts("strides");
  const std::vector<int64_t>& pads = ctx.getInts("pads");
  const int64_t h = x_shape[2], w = x_shape[3];
  const int64_t count = y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3];
  for (int64_t y = 0; y < count; ++y) {
    const std::vector<int64_t> idx = unravelIndex(y, y_shape);
    const int64_t h0 = idx[2] * strides[0] - pads[0], w0 = idx[3] * strides[1] - pads[1];
    const int64_t h1 = std::min(h0 + kernel[0], h + pads[2]), w1 = std::min(w0 + kernel[1], w + pads[3]);
    PoolWindow p;
    p.plane = (idx[0] * x_shape[1] + idx[1]) * h * w;
    p.h_first = std::max<int64_t>(h0, 0);
    p.h_last = std::min(h1, h);
    p.w_first = std::max<int64_t>(w0, 0);
    p.w_last = std::min(w1, w);
    p.padded_count = (h1 - h0) * (w1 - w0);
    p.width = w;
    window(y, p);
  }
}

// The input offset of a window's maximum: the first strict maximum, or the last NaN (PyTorch's
// rule); -1 for an empty window.
int64_t poolWindowArgmax(const std::vector<double>& x, const PoolWindow& p);

}  // namespace cleave::ops
