// Constant evaluation: a small reference interpreter for the ops constant folding needs.
#include "ir/constant_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>

namespace cleave {
namespace {

// ---------------------------------------------------------------------------------------------
// Element access. Elements are copied into std::vector<T> (bool is stored as one byte: uint8_t).

template <class T>
std::vector<T> readElements(const TensorData& tensor) {
  std::vector<T> elements(static_cast<size_t>(tensor.type.numel()));
  if (!elements.empty()) std::memcpy(elements.data(), tensor.bytes.data(), elements.size() * sizeof(T));
  return elements;
}

template <class T>
TensorData makeTensor(const TensorType& type, const std::vector<T>& elements) {
  TensorData tensor{type, std::vector<uint8_t>(elements.size() * sizeof(T))};
  if (!elements.empty()) std::memcpy(tensor.bytes.data(), elements.data(), tensor.bytes.size());
  return tensor;
}

// Calls fn(T{}) with the C++ element type of `dtype`; only the dtypes isConstantEvaluable accepts.
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

bool isEvaluableDType(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kI64 || d == DType::kI32 || d == DType::kBool;
}
bool isNumeric(DType d) { return d == DType::kF32 || d == DType::kF64 || d == DType::kI64 || d == DType::kI32; }
bool isFloatingPoint(DType d) { return d == DType::kF32 || d == DType::kF64; }

// ---------------------------------------------------------------------------------------------
// Index arithmetic. Data movement ops are written as "output element i reads input element
// source[i]", which keeps every op's index rule in one short function.

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

// base + Σ idx[d]·strides[d] for every multi-index idx of `shape`, in row-major order.
std::vector<int64_t> stridedIndices(const Shape& shape, const std::vector<int64_t>& strides, int64_t base = 0) {
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

// For every element of `out_shape`, the element of `in_shape` it reads under numpy broadcasting.
std::vector<int64_t> broadcastSourceIndices(const Shape& in_shape, const Shape& out_shape) {
  const size_t offset = out_shape.size() - in_shape.size();
  const std::vector<int64_t> in_strides = rowMajorStrides(in_shape);
  std::vector<int64_t> strides(out_shape.size(), 0);  // broadcast dims read the same element
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (in_shape[d] != 1) strides[d + offset] = in_strides[d];
  return stridedIndices(out_shape, strides);
}

// A tensor of `type` whose element i is element source[i] of `input`, or zero where source[i] < 0.
TensorData selectElements(const TensorData& input, const TensorType& type, const std::vector<int64_t>& source) {
  const size_t size = static_cast<size_t>(dtypeSize(type.dtype));
  TensorData out{type, std::vector<uint8_t>(source.size() * size, 0)};
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] >= 0) std::memcpy(out.bytes.data() + i * size, input.bytes.data() + source[i] * size, size);
  return out;
}

Status badInput(OpId op, const std::string& message) {
  return Status::badInput(std::string(opName(op)) + ": " + message);
}

// ---------------------------------------------------------------------------------------------
// Elementwise arithmetic. Integers wrap around on overflow (two's complement) instead of
// invoking undefined behaviour; integer division truncates toward zero.

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

// base^exponent for integers: exact (wrapping) for exponent ≥ 0, truncated 1/base^|exponent| below.
template <class T>
T integerPow(T base, T exponent) {
  if (exponent < 0) return base == 1 ? 1 : base == -1 ? (exponent % 2 == 0 ? 1 : -1) : 0;
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = wrappingMul(result, base);
    base = wrappingMul(base, base);
    exponent >>= 1;
  }
  return result;
}

// One arithmetic op on two elements; sets `error` instead of dividing an integer by zero.
template <class T>
T arithmetic(OpId op, T a, T b, const char*& error) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case OpId::add: return a + b;
      case OpId::sub: return a - b;
      case OpId::mul: return a * b;
      case OpId::div: return a / b;
      default: return std::pow(a, b);
    }
  } else {
    switch (op) {
      case OpId::add: return wrappingAdd(a, b);
      case OpId::sub: return wrappingSub(a, b);
      case OpId::mul: return wrappingMul(a, b);
      case OpId::div:
        if (b == 0) {
          error = "integer division by zero";
          return 0;
        }
        return b == -1 ? wrappingSub(T{0}, a) : static_cast<T>(a / b);  // -1: INT_MIN / -1 wraps
      default:
        if (a == 0 && b < 0) {
          error = "zero raised to a negative integer power";
          return 0;
        }
        return integerPow(a, b);
    }
  }
}

uint8_t compare(OpId op, auto a, auto b) {
  switch (op) {
    case OpId::equal: return a == b;
    case OpId::less: return a < b;
    case OpId::less_equal: return a <= b;
    case OpId::greater: return a > b;
    default: return a >= b;  // greater_equal
  }
}

Expected<TensorData> evaluateBinary(OpId op, const TensorData& a, const TensorData& b, const TensorType& result) {
  const std::vector<int64_t> a_index = broadcastSourceIndices(a.type.shape, result.shape);
  const std::vector<int64_t> b_index = broadcastSourceIndices(b.type.shape, result.shape);
  const bool is_comparison = result.dtype == DType::kBool;
  return visitDType(a.type.dtype, [&]<class T>(T) -> Expected<TensorData> {
    const std::vector<T> lhs = readElements<T>(a), rhs = readElements<T>(b);
    if (is_comparison) {
      std::vector<uint8_t> out(a_index.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = compare(op, lhs[a_index[i]], rhs[b_index[i]]);
      return makeTensor(result, out);
    }
    if constexpr (std::is_same_v<T, uint8_t>) {
      return Status::internal("constant evaluation: arithmetic on bool");
    } else {
      const char* error = nullptr;
      std::vector<T> out(a_index.size());
      for (size_t i = 0; i < out.size() && !error; ++i) out[i] = arithmetic(op, lhs[a_index[i]], rhs[b_index[i]], error);
      if (error) return badInput(op, error);
      return makeTensor(result, out);
    }
  });
}

// One float unary op on x; gelu's form and clip's bounds come from the node's attributes.
template <class T>
T floatUnary(OpId op, T x, const OpContext& ctx) {
  switch (op) {
    case OpId::sqrt: return std::sqrt(x);
    case OpId::exp: return std::exp(x);
    case OpId::log: return std::log(x);
    case OpId::erf: return std::erf(x);
    case OpId::tanh: return std::tanh(x);
    case OpId::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case OpId::gelu:
      if (ctx.getString("approximate") == "tanh") {
        const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
        return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
      }
      return T(0.5) * x * (T(1) + std::erf(x / std::numbers::sqrt2_v<T>));
    default: {  // clip; a NaN stays NaN
      const T low = static_cast<T>(ctx.getFloat("min")), high = static_cast<T>(ctx.getFloat("max"));
      return std::min(std::max(x, low), high);
    }
  }
}

TensorData evaluateUnary(OpId op, const TensorData& x, const TensorType& result, const OpContext& ctx) {
  return visitDType(x.type.dtype, [&]<class T>(T) -> TensorData {
    std::vector<T> elements = readElements<T>(x);
    for (T& e : elements) {
      if (op == OpId::neg) {
        if constexpr (std::is_integral_v<T>) e = wrappingSub(T{0}, e);
        else e = -e;
      } else if (op == OpId::relu) {
        e = e < T{0} ? T{0} : e;  // keeps NaN
      } else if constexpr (std::is_floating_point_v<T>) {
        e = floatUnary(op, e, ctx);
      }
    }
    return makeTensor(result, elements);
  });
}

// ---------------------------------------------------------------------------------------------
// cast: float→int truncates toward zero (NaN or out of range is an error), int→int wraps,
// anything→bool is "≠ 0", bool→anything is 0 or 1.

template <class To, class From>
bool convertElement(From value, bool to_bool, To& out) {
  if (to_bool) {
    out = value != From{0} ? 1 : 0;
    return true;
  }
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    const double truncated = std::trunc(static_cast<double>(value));
    const double low = static_cast<double>(std::numeric_limits<To>::min());  // -2^(bits-1), exact
    if (!(truncated >= low && truncated < -low)) return false;
    out = static_cast<To>(truncated);
  } else {
    out = static_cast<To>(value);
  }
  return true;
}

Expected<TensorData> evaluateCast(const TensorData& x, const TensorType& result) {
  const bool to_bool = result.dtype == DType::kBool;
  return visitDType(x.type.dtype, [&]<class From>(From) -> Expected<TensorData> {
    const std::vector<From> in = readElements<From>(x);
    return visitDType(result.dtype, [&]<class To>(To) -> Expected<TensorData> {
      std::vector<To> out(in.size());
      for (size_t i = 0; i < in.size(); ++i)
        if (!convertElement(in[i], to_bool, out[i]))
          return badInput(OpId::cast, "element " + std::to_string(i) + " (" + std::to_string(in[i]) +
                                          ") does not fit in " + std::string(dtypeName(result.dtype)));
      return makeTensor(result, out);
    });
  });
}

TensorData evaluateWhere(const TensorData& cond, const TensorData& a, const TensorData& b, const TensorType& result) {
  const std::vector<int64_t> cond_index = broadcastSourceIndices(cond.type.shape, result.shape);
  const std::vector<int64_t> a_index = broadcastSourceIndices(a.type.shape, result.shape);
  const std::vector<int64_t> b_index = broadcastSourceIndices(b.type.shape, result.shape);
  const size_t size = static_cast<size_t>(dtypeSize(result.dtype));
  TensorData out{result, std::vector<uint8_t>(cond_index.size() * size)};
  for (size_t i = 0; i < cond_index.size(); ++i) {
    const bool take_a = cond.bytes[cond_index[i]] != 0;
    const uint8_t* from = take_a ? a.bytes.data() + a_index[i] * size : b.bytes.data() + b_index[i] * size;
    std::memcpy(out.bytes.data() + i * size, from, size);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reductions over `axes` (empty: all). keepdims does not change the row-major order of the
// results, so the result type's shape is used as given.

Expected<TensorData> evaluateReduce(OpId op, const TensorData& x, const TensorType& result, const OpContext& ctx) {
  const Shape& shape = x.type.shape;
  // 1. Which dims are reduced.
  std::vector<bool> reduced(shape.size(), ctx.getInts("axes").empty());
  for (int64_t axis : ctx.getInts("axes")) {
    int64_t d = normalizeAxis(axis, x.type.rank());
    if (d < 0) return badInput(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(x.type.rank()));
    reduced[d] = true;
  }
  // 2. For each input element, the result element it contributes to: reduced dims get stride 0.
  Shape kept_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) kept_shape[d] = 1;
  std::vector<int64_t> strides = rowMajorStrides(kept_shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) strides[d] = 0;
  const std::vector<int64_t> target = stridedIndices(shape, strides);
  const int64_t out_count = numelOf(kept_shape);
  const int64_t group_size = out_count == 0 ? 0 : x.type.numel() / out_count;
  if (op == OpId::reduce_max && group_size == 0 && out_count > 0)
    return badInput(op, "the maximum of an empty set is undefined");
  // 3. Accumulate (floats in double, integers wrapping in their own type).
  return visitDType(x.type.dtype, [&]<class T>(T) -> Expected<TensorData> {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const std::vector<T> in = readElements<T>(x);
    std::vector<Acc> acc(static_cast<size_t>(out_count), Acc{0});
    std::vector<bool> seen(acc.size(), false);
    for (size_t i = 0; i < in.size(); ++i) {
      Acc& slot = acc[target[i]];
      if (op != OpId::reduce_max) slot = addElements(slot, static_cast<Acc>(in[i]));
      else if (!seen[target[i]] || in[i] > slot || std::isnan(static_cast<double>(in[i]))) slot = in[i];
      seen[target[i]] = true;
    }
    std::vector<T> out(acc.size());
    for (size_t i = 0; i < acc.size(); ++i)
      out[i] = static_cast<T>(op == OpId::reduce_mean ? acc[i] / static_cast<Acc>(group_size) : acc[i]);
    return makeTensor(result, out);
  });
}

// ---------------------------------------------------------------------------------------------
// Data movement. Ops that only relabel the shape (reshape, flatten, squeeze, unsqueeze,
// identity) keep the bytes and take the result type.

Expected<TensorData> evaluateTranspose(const TensorData& x, const TensorType& result, const OpContext& ctx) {
  const int64_t rank = x.type.rank();
  std::vector<int64_t> perm = ctx.getInts("perm");
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank)
    return badInput(OpId::transpose, "perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  // Result dim d walks input dim perm[d].
  const std::vector<int64_t> in_strides = rowMajorStrides(x.type.shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    const int64_t from = normalizeAxis(perm[d], rank);
    if (from < 0) return badInput(OpId::transpose, "perm entry " + std::to_string(perm[d]) + " is out of range");
    strides[d] = in_strides[from];
  }
  return selectElements(x, result, stridedIndices(result.shape, strides));
}

// ONNX Slice: negative starts/ends count from the end, then both are clamped to the dimension
// ([0, dim] for positive steps, [0, dim-1] and [-1, dim-1] for negative ones).
Expected<TensorData> evaluateSlice(const TensorData& x, const TensorType& result, const OpContext& ctx) {
  const Shape& shape = x.type.shape;
  const int64_t rank = x.type.rank();
  const std::vector<int64_t>& starts = ctx.getInts("starts");
  const std::vector<int64_t>& ends = ctx.getInts("ends");
  std::vector<int64_t> axes = ctx.getInts("axes");
  std::vector<int64_t> steps = ctx.getInts("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return badInput(OpId::slice, "starts, ends, axes and steps differ in length");
  // 1. Every dim starts as "all of it, step 1".
  Shape out_shape = shape;
  std::vector<int64_t> first(shape.size(), 0), step(shape.size(), 1);
  std::vector<bool> sliced(shape.size(), false);
  // 2. Resolve each sliced axis to a first index, a step and an element count.
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalizeAxis(axes[i], rank);
    if (axis < 0) return badInput(OpId::slice, "axis " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(rank));
    if (sliced[axis]) return badInput(OpId::slice, "axis " + std::to_string(axes[i]) + " is sliced twice");
    if (steps[i] == 0) return badInput(OpId::slice, "step 0 on axis " + std::to_string(axes[i]));
    sliced[axis] = true;
    const int64_t dim = shape[axis];
    const int64_t s = steps[i];
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count = 0;
    if (dim > 0) {
      if (s > 0) {
        start = std::min(std::max<int64_t>(start, 0), dim);
        end = std::min(std::max<int64_t>(end, 0), dim);
      } else {
        start = std::min(std::max<int64_t>(start, 0), dim - 1);
        end = std::min(std::max<int64_t>(end, -1), dim - 1);
      }
      const int64_t span = s > 0 ? end - start : start - end;
      const int64_t magnitude = s > 0 ? s : (s == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -s);
      count = span <= 0 ? 0 : (span - 1) / magnitude + 1;
    }
    out_shape[axis] = count;
    first[axis] = start;
    step[axis] = s;
  }
  if (out_shape != result.shape)
    return Status::internal("slice: evaluated shape " + shapeStr(out_shape) + " differs from the result type " + result.str());
  // 3. Result element idx reads input element Σ (first[d] + idx[d]·step[d]) · in_strides[d].
  const std::vector<int64_t> in_strides = rowMajorStrides(shape);
  int64_t base = 0;
  std::vector<int64_t> strides(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (out_shape[d] == 0) return TensorData{result, {}};
    base += first[d] * in_strides[d];
    if (out_shape[d] > 1) strides[d] = in_strides[d] * step[d];  // a dim of size 1 never steps
  }
  return selectElements(x, result, stridedIndices(out_shape, strides, base));
}

// Gather: result[outer..., j..., inner...] = data[outer..., indices[j...], inner...]; negative
// indices count from the end of the axis.
Expected<TensorData> evaluateGather(const TensorData& data, const TensorData& indices, const TensorType& result,
                                    const OpContext& ctx) {
  const Shape& shape = data.type.shape;
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), data.type.rank());
  if (axis < 0) return badInput(OpId::gather, "axis " + std::to_string(ctx.getInt("axis")) + " is out of range");
  const int64_t dim = shape[axis];
  const int64_t outer = numelOf(Shape(shape.begin(), shape.begin() + axis));
  const int64_t inner = numelOf(Shape(shape.begin() + axis + 1, shape.end()));
  // 1. Read the indices as i64 and resolve negative ones.
  std::vector<int64_t> rows;
  if (indices.type.dtype == DType::kI32) {
    for (int32_t i : readElements<int32_t>(indices)) rows.push_back(i);
  } else {
    rows = readElements<int64_t>(indices);
  }
  for (int64_t& row : rows) {
    if (row < -dim || row >= dim)
      return badInput(OpId::gather, "index " + std::to_string(row) + " is out of range for axis " +
                                        std::to_string(axis) + " of size " + std::to_string(dim));
    if (row < 0) row += dim;
  }
  // 2. Result element (o, j, k) reads data element (o·dim + rows[j])·inner + k.
  std::vector<int64_t> source;
  source.reserve(static_cast<size_t>(outer * static_cast<int64_t>(rows.size()) * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t row : rows)
      for (int64_t k = 0; k < inner; ++k) source.push_back((o * dim + row) * inner + k);
  return selectElements(data, result, source);
}

TensorData evaluateConcat(std::span<const TensorData* const> operands, const TensorType& result, const OpContext& ctx) {
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), result.rank());
  const int64_t outer = numelOf(Shape(result.shape.begin(), result.shape.begin() + axis));
  const int64_t inner = numelOf(Shape(result.shape.begin() + axis + 1, result.shape.end()));
  const int64_t size = dtypeSize(result.dtype);
  TensorData out{result, std::vector<uint8_t>(static_cast<size_t>(result.bytes()))};
  // For each outer index, the operands' blocks follow each other along the axis.
  uint8_t* to = out.bytes.data();
  for (int64_t o = 0; o < outer; ++o) {
    for (const TensorData* operand : operands) {
      const int64_t block = operand->type.shape[axis] * inner * size;
      if (block > 0) std::memcpy(to, operand->bytes.data() + o * block, static_cast<size_t>(block));
      to += block;
    }
  }
  return out;
}

std::vector<TensorData> evaluateSplit(const TensorData& x, std::span<const TensorType> results, const OpContext& ctx) {
  const Shape& shape = x.type.shape;
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), x.type.rank());
  const int64_t outer = numelOf(Shape(shape.begin(), shape.begin() + axis));
  const int64_t inner = numelOf(Shape(shape.begin() + axis + 1, shape.end()));
  const int64_t size = dtypeSize(x.type.dtype);
  const int64_t in_block = shape[axis] * inner * size;
  std::vector<TensorData> outs;
  int64_t offset = 0;  // bytes from the start of each outer block to this piece
  for (const TensorType& type : results) {
    const int64_t block = type.shape[axis] * inner * size;
    TensorData out{type, std::vector<uint8_t>(static_cast<size_t>(type.bytes()))};
    for (int64_t o = 0; o < outer && block > 0; ++o)
      std::memcpy(out.bytes.data() + o * block, x.bytes.data() + o * in_block + offset, static_cast<size_t>(block));
    offset += block;
    outs.push_back(std::move(out));
  }
  return outs;
}

// Trilu on the last two dims (row i, column j): upper keeps j - i >= k, lower keeps j - i <= k.
TensorData evaluateTrilu(const TensorData& x, const TensorType& result, const OpContext& ctx) {
  const bool upper = ctx.getInt("upper") != 0;
  const int64_t k = ctx.getInt("k");
  const int64_t rows = x.type.shape[x.type.rank() - 2], cols = x.type.shape[x.type.rank() - 1];
  std::vector<int64_t> source(static_cast<size_t>(x.type.numel()));
  for (int64_t i = 0; i < static_cast<int64_t>(source.size()); ++i) {
    const int64_t diagonal_offset = i % cols - (i / cols) % rows;  // j - i
    const bool keep = upper ? diagonal_offset >= k : diagonal_offset <= k;
    source[i] = keep ? i : -1;
  }
  return selectElements(x, result, source);
}

}  // namespace

bool isConstantEvaluable(OpId op, std::span<const TensorType> operand_types, std::span<const TensorType> result_types) {
  const OpDef& def = opDef(op);
  const int n = static_cast<int>(operand_types.size());
  if (n < def.min_operands || (def.max_operands >= 0 && n > def.max_operands) || result_types.empty()) return false;
  for (const auto& types : {operand_types, result_types})
    for (const TensorType& t : types)
      if (!isEvaluableDType(t.dtype)) return false;
  const DType x = operand_types.empty() ? DType::kBool : operand_types[0].dtype;
  switch (op) {
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::neg:
    case OpId::relu:
    case OpId::reduce_sum:
    case OpId::reduce_max:
    case OpId::less:
    case OpId::less_equal:
    case OpId::greater:
    case OpId::greater_equal:
      return isNumeric(x);
    case OpId::sqrt:
    case OpId::exp:
    case OpId::log:
    case OpId::erf:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::clip:
    case OpId::reduce_mean:
      return isFloatingPoint(x);
    case OpId::equal:
    case OpId::cast:
    case OpId::where:
    case OpId::identity:
    case OpId::reshape:
    case OpId::flatten:
    case OpId::transpose:
    case OpId::concat:
    case OpId::split:
    case OpId::slice:
    case OpId::gather:
    case OpId::expand:
    case OpId::squeeze:
    case OpId::unsqueeze:
    case OpId::trilu:
      return true;
    default:
      return false;
  }
}

Expected<std::vector<TensorData>> evaluateConstantNode(OpId op, const AttrMap& attrs,
                                                       std::span<const TensorData* const> operands,
                                                       std::span<const TensorType> result_types) {
  // 1. Check that this is a node the evaluator handles and that each operand's bytes fit its type.
  std::vector<TensorType> operand_types;
  for (const TensorData* operand : operands) operand_types.push_back(operand->type);
  if (!isConstantEvaluable(op, operand_types, result_types))
    return Status::internal("constant evaluation does not support " + std::string(opName(op)) + " on these types");
  for (size_t i = 0; i < operands.size(); ++i)
    if (static_cast<int64_t>(operands[i]->bytes.size()) != operands[i]->type.bytes())
      return badInput(op, "operand " + std::to_string(i) + " holds " + std::to_string(operands[i]->bytes.size()) +
                              " bytes, its type " + operands[i]->type.str() + " needs " +
                              std::to_string(operands[i]->type.bytes()));
  // 2. Compute.
  const OpContext ctx{opDef(op), operand_types, result_types, attrs};
  const TensorType& result = result_types[0];
  const TensorData& x = *operands[0];
  auto single = [](Expected<TensorData> value) -> Expected<std::vector<TensorData>> {
    if (!value) return value.status();
    return std::vector<TensorData>{std::move(*value)};
  };
  switch (op) {
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::equal:
    case OpId::less:
    case OpId::less_equal:
    case OpId::greater:
    case OpId::greater_equal:
      return single(evaluateBinary(op, x, *operands[1], result));
    case OpId::sqrt:
    case OpId::exp:
    case OpId::log:
    case OpId::neg:
    case OpId::erf:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::relu:
    case OpId::gelu:
    case OpId::clip:
      return single(evaluateUnary(op, x, result, ctx));
    case OpId::cast: return single(evaluateCast(x, result));
    case OpId::where: return single(evaluateWhere(x, *operands[1], *operands[2], result));
    case OpId::reduce_sum:
    case OpId::reduce_mean:
    case OpId::reduce_max:
      return single(evaluateReduce(op, x, result, ctx));
    case OpId::transpose: return single(evaluateTranspose(x, result, ctx));
    case OpId::slice: return single(evaluateSlice(x, result, ctx));
    case OpId::gather: return single(evaluateGather(x, *operands[1], result, ctx));
    case OpId::expand: return single(selectElements(x, result, broadcastSourceIndices(x.type.shape, result.shape)));
    case OpId::concat: return single(evaluateConcat(operands, result, ctx));
    case OpId::split: return evaluateSplit(x, result_types, ctx);
    case OpId::trilu: return single(evaluateTrilu(x, result, ctx));
    case OpId::identity:
    case OpId::reshape:
    case OpId::flatten:
    case OpId::squeeze:
    case OpId::unsqueeze:
      return single(TensorData{result, x.bytes});  // same elements, new shape
    default:
      return Status::internal("constant evaluation has no rule for " + std::string(opName(op)));
  }
}

}  // namespace cleave
