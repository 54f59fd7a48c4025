// CUDA kernels of the elementwise ops: arithmetic, comparisons, unary math, clip, cast, where,
// dropout and identity (numpy broadcasting; results may alias same-shaped operands).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ir/ops/float_to_integer.h"
#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// ---- Integer arithmetic wraps around (two's complement), as on the CPU ----

template <class T>
__device__ T wrap(std::make_unsigned_t<T> value) {
  return static_cast<T>(value);
}
template <class T>
__device__ T integerPow(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  if (exponent < 0) return base == 1 ? T{1} : base == T(-1) ? (exponent % 2 == 0 ? T{1} : T(-1)) : T{0};
  U result = 1, b = static_cast<U>(base);
  while (exponent > 0) {
    if (exponent & 1) result *= b;
    b *= b;
    exponent = static_cast<T>(exponent >> 1);
  }
  return static_cast<T>(result);
}

// The binary arithmetic op kOp on T. Integer division by zero and zero to a negative power are
// not detected on the GPU (they give 0; the CPU reports them).
template <OpId kOp, class T>
struct Arithmetic {
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if constexpr (kOp == OpId::add) return a + b;
      else if constexpr (kOp == OpId::sub) return a - b;
      else if constexpr (kOp == OpId::mul) return a * b;
      else if constexpr (kOp == OpId::div) return a / b;
      else return devicePow(a, b);
    } else {
      using U = std::make_unsigned_t<T>;
      if constexpr (kOp == OpId::add) return wrap<T>(static_cast<U>(a) + static_cast<U>(b));
      else if constexpr (kOp == OpId::sub) return wrap<T>(static_cast<U>(a) - static_cast<U>(b));
      else if constexpr (kOp == OpId::mul) return wrap<T>(static_cast<U>(a) * static_cast<U>(b));
      else if constexpr (kOp == OpId::div)
        return b == T(-1) ? wrap<T>(U{0} - static_cast<U>(a)) : b == T{0} ? T{0} : static_cast<T>(a / b);
      else return (a == T{0} && b < T{0}) ? T{0} : integerPow(a, b);
    }
  }
};

template <OpId kOp, class T>
struct Comparison {
  __device__ uint8_t operator()(T a, T b) const {
    if constexpr (kOp == OpId::equal) return a == b;
    else if constexpr (kOp == OpId::less) return a < b;
    else if constexpr (kOp == OpId::less_equal) return a <= b;
    else if constexpr (kOp == OpId::greater) return a > b;
    else return a >= b;
  }
};

// out[i] = op(a[offset 0 of i], b[offset 1 of i]); `same` when neither operand is broadcast.
template <class T, class R, class Op>
__global__ void binaryKernel(const T* a, const T* b, R* out, int64_t n, IndexMap map, bool same, Op op) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t ia = same ? i : mapOffset(map, 0, i);
    const int64_t ib = same ? i : mapOffset(map, 1, i);
    out[i] = op(a[ia], b[ib]);
  }
}

template <class T, class R, class Op>
Status launchBinary(const KernelCall& call, CudaContext& context, Op op) {
  const Shape& a_shape = call.op.operands[0].shape;
  const Shape& b_shape = call.op.operands[1].shape;
  const Shape& out_shape = call.op.results[0].shape;
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, broadcastMap(call, out_shape, {&a_shape, &b_shape}));
  const bool same = a_shape == out_shape && b_shape == out_shape;
  binaryKernel<T, R, Op><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.in<T>(1),
                                                                                 call.out<R>(0), n, map, same, op);
  return launchStatus(call);
}

template <OpId kOp>
Status arithmeticKernel(const KernelCall& call, CudaContext& context) {
  return visitNumeric(call, call.op.operands[0].dtype,
                      [&]<class T>(T) { return launchBinary<T, T>(call, context, Arithmetic<kOp, T>{}); });
}

template <OpId kOp>
Status comparisonKernel(const KernelCall& call, CudaContext& context) {
  if (call.op.operands[0].dtype == DType::kBool)
    return launchBinary<uint8_t, uint8_t>(call, context, Comparison<kOp, uint8_t>{});
  return visitNumeric(call, call.op.operands[0].dtype,
                      [&]<class T>(T) { return launchBinary<T, uint8_t>(call, context, Comparison<kOp, T>{}); });
}

// ---- Unary math ----

template <OpId kOp, class T>
struct Unary {
  bool tanh_approximation = false;  // gelu only
  __device__ T operator()(T x) const {
    if constexpr (kOp == OpId::sqrt) return deviceSqrt(x);
    else if constexpr (kOp == OpId::exp) return deviceExp(x);
    else if constexpr (kOp == OpId::log) return deviceLog(x);
    else if constexpr (kOp == OpId::erf) return deviceErf(x);
    else if constexpr (kOp == OpId::sin) { if constexpr (std::is_same_v<T, float>) return sinf(x); else return sin(x); }
    else if constexpr (kOp == OpId::cos) { if constexpr (std::is_same_v<T, float>) return cosf(x); else return cos(x); }
    else if constexpr (kOp == OpId::tan) { if constexpr (std::is_same_v<T, float>) return tanf(x); else return tan(x); }
    else if constexpr (kOp == OpId::asin) { if constexpr (std::is_same_v<T, float>) return asinf(x); else return asin(x); }
    else if constexpr (kOp == OpId::acos) { if constexpr (std::is_same_v<T, float>) return acosf(x); else return acos(x); }
    else if constexpr (kOp == OpId::atan) { if constexpr (std::is_same_v<T, float>) return atanf(x); else return atan(x); }
    else if constexpr (kOp == OpId::sinh) { if constexpr (std::is_same_v<T, float>) return sinhf(x); else return sinh(x); }
    else if constexpr (kOp == OpId::cosh) { if constexpr (std::is_same_v<T, float>) return coshf(x); else return cosh(x); }
    else if constexpr (kOp == OpId::asinh) { if constexpr (std::is_same_v<T, float>) return asinhf(x); else return asinh(x); }
    else if constexpr (kOp == OpId::acosh) { if constexpr (std::is_same_v<T, float>) return acoshf(x); else return acosh(x); }
    else if constexpr (kOp == OpId::atanh) { if constexpr (std::is_same_v<T, float>) return atanhf(x); else return atanh(x); }
    else if constexpr (kOp == OpId::floor) { if constexpr (std::is_same_v<T, float>) return floorf(x); else return floor(x); }
    else if constexpr (kOp == OpId::ceil) { if constexpr (std::is_same_v<T, float>) return ceilf(x); else return ceil(x); }
    else if constexpr (kOp == OpId::round) { if constexpr (std::is_same_v<T, float>) return rintf(x); else return rint(x); }
    else if constexpr (kOp == OpId::tanh) return deviceTanh(x);
    else if constexpr (kOp == OpId::sigmoid) return T(1) / (T(1) + deviceExp(-x));
    else if constexpr (kOp == OpId::gelu) {
      if (tanh_approximation) {
        const T beta = T(0.79788456080286535587989211986876);  // sqrt(2/pi)
        const T kappa = T(0.044715);
        const T cube = x * x * x;
        return T(0.5) * x * (T(1) + deviceTanh(beta * (x + kappa * cube)));
      }
      return x * T(0.5) * (T(1) + deviceErf(x * T(0.70710678118654752440084436210485)));
    } else if constexpr (kOp == OpId::neg) {
      if constexpr (std::is_floating_point_v<T>) return -x;
      else return wrap<T>(std::make_unsigned_t<T>{0} - static_cast<std::make_unsigned_t<T>>(x));
    } else {  // relu keeps NaN
      return x < T{0} ? T{0} : x;
    }
  }
};

// clip: min(max(x, lo), hi); a NaN stays NaN.
template <class T>
struct Clip {
  T lo, hi;
  __device__ T operator()(T x) const {
    const T raised = x < lo ? lo : x;
    return raised > hi ? hi : raised;
  }
};

template <class T, class Fn>
__global__ void unaryKernel(const T* x, T* y, int64_t n, Fn fn) {
  CLEAVE_GRID_LOOP(i, n) y[i] = fn(x[i]);
}

template <class T, class Fn>
Status launchUnary(const KernelCall& call, CudaContext& context, Fn fn) {
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  unaryKernel<T, Fn><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.out<T>(0), n, fn);
  return launchStatus(call);
}

template <OpId kOp>
Status floatUnaryKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    Unary<kOp, T> fn;
    if constexpr (kOp == OpId::gelu) fn.tanh_approximation = call.op.getString("approximate") == "tanh";
    return launchUnary<T>(call, context, fn);
  });
}

template <OpId kOp>
Status numericUnaryKernel(const KernelCall& call, CudaContext& context) {
  return visitNumeric(call, call.op.operands[0].dtype,
                      [&]<class T>(T) { return launchUnary<T>(call, context, Unary<kOp, T>{}); });
}

// A clip bound (a double attribute) in T: integers round inward and saturate at T's range.
template <class T>
T clipBound(double bound, bool is_min) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(bound);
  } else {
    const double rounded = is_min ? std::ceil(bound) : std::floor(bound);
    if (rounded <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (rounded >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(rounded);
  }
}

Status clipKernel(const KernelCall& call, CudaContext& context) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const Clip<T> fn{clipBound<T>(call.op.getFloat("min"), true), clipBound<T>(call.op.getFloat("max"), false)};
    return launchUnary<T>(call, context, fn);
  });
}

// ---- cast ----

// Storage of bool (a byte, 0 or 1).
struct Bool {
  uint8_t byte;
};

template <class Fn>
Status visitStorage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI8: return fn(int8_t{});
    case DType::kU8: return fn(uint8_t{});
    case DType::kBool: return fn(Bool{});
    case DType::kF16: return fn(__half{});
    case DType::kBF16: return fn(__nv_bfloat16{});
  }
  return Status::internal("cast: unknown dtype");
}

// A stored element as an arithmetic value: f16 and bf16 widen to float, bool gives 0 or 1.
template <class S>
__device__ auto widen(S s) {
  if constexpr (std::is_same_v<S, __half>) return __half2float(s);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(s);
  else if constexpr (std::is_same_v<S, Bool>) return static_cast<uint8_t>(s.byte != 0);
  else return s;
}

// Stores an arithmetic value as D: to bool is "≠ 0", f16/bf16 round to nearest from float, float
// to integer as PyTorch does it on the CPU (ir/ops/float_to_integer.h, so a plan gives the same
// result on every device), the rest as static_cast.
template <class D, class V>
__device__ D narrow(V value) {
  if constexpr (std::is_same_v<D, Bool>) return Bool{static_cast<uint8_t>(value != V{0})};
  else if constexpr (std::is_same_v<D, __half>) return __float2half_rn(static_cast<float>(value));
  else if constexpr (std::is_same_v<D, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(value));
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) return floatToInteger<D>(static_cast<double>(value));
  else return static_cast<D>(value);
}

template <class From, class To>
__global__ void castElements(const From* in, To* out, int64_t n) {
  CLEAVE_GRID_LOOP(i, n) out[i] = narrow<To>(widen(in[i]));
}

Status castKernel(const KernelCall& call, CudaContext& context) {
  const DType from_dtype = call.op.operands[0].dtype, to_dtype = call.op.results[0].dtype;
  const int64_t n = call.op.results[0].numel();
  if (from_dtype == to_dtype) return copyBytes(call, context, call.outputs[0], call.inputs[0], call.op.results[0].bytes());
  if (n == 0) return Status::ok();
  return visitStorage(from_dtype, [&]<class From>(From) {
    return visitStorage(to_dtype, [&]<class To>(To) {
      castElements<From, To><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<From>(0), call.out<To>(0), n);
      return launchStatus(call);
    });
  });
}

// ---- where, dropout, identity ----

template <class E>
__global__ void whereElements(const uint8_t* cond, const E* a, const E* b, E* out, int64_t n, IndexMap map) {
  CLEAVE_GRID_LOOP(i, n) out[i] = cond[mapOffset(map, 0, i)] ? a[mapOffset(map, 1, i)] : b[mapOffset(map, 2, i)];
}

Status whereKernel(const KernelCall& call, CudaContext& context) {
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  CLEAVE_ASSIGN_OR_RETURN(const IndexMap map,
                          broadcastMap(call, call.op.results[0].shape,
                                       {&call.op.operands[0].shape, &call.op.operands[1].shape,
                                        &call.op.operands[2].shape}));
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    whereElements<E><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<uint8_t>(0), call.in<E>(1),
                                                                           call.in<E>(2), call.out<E>(0), n, map);
    return launchStatus(call);
  });
}

// identity, and dropout: plans contain dropout only for inference, where it is the identity (as
// on the CPU), so the kernel copies.
Status copyKernel(const KernelCall& call, CudaContext& context) {
  return copyBytes(call, context, call.outputs[0], call.inputs[0], call.op.results[0].bytes());
}

}  // namespace

void registerElementwiseKernels(CudaKernelTable& table) {
  auto set = [&](OpId id, CudaKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::add, arithmeticKernel<OpId::add>);
  set(OpId::sub, arithmeticKernel<OpId::sub>);
  set(OpId::mul, arithmeticKernel<OpId::mul>);
  set(OpId::div, arithmeticKernel<OpId::div>);
  set(OpId::pow, arithmeticKernel<OpId::pow>);
  set(OpId::equal, comparisonKernel<OpId::equal>);
  set(OpId::less, comparisonKernel<OpId::less>);
  set(OpId::less_equal, comparisonKernel<OpId::less_equal>);
  set(OpId::greater, comparisonKernel<OpId::greater>);
  set(OpId::greater_equal, comparisonKernel<OpId::greater_equal>);
  set(OpId::sqrt, floatUnaryKernel<OpId::sqrt>);
  set(OpId::exp, floatUnaryKernel<OpId::exp>);
  set(OpId::log, floatUnaryKernel<OpId::log>);
  set(OpId::erf, floatUnaryKernel<OpId::erf>);
  set(OpId::sin, floatUnaryKernel<OpId::sin>);
  set(OpId::cos, floatUnaryKernel<OpId::cos>);
  set(OpId::tan, floatUnaryKernel<OpId::tan>);
  set(OpId::asin, floatUnaryKernel<OpId::asin>);
  set(OpId::acos, floatUnaryKernel<OpId::acos>);
  set(OpId::atan, floatUnaryKernel<OpId::atan>);
  set(OpId::sinh, floatUnaryKernel<OpId::sinh>);
  set(OpId::cosh, floatUnaryKernel<OpId::cosh>);
  set(OpId::asinh, floatUnaryKernel<OpId::asinh>);
  set(OpId::acosh, floatUnaryKernel<OpId::acosh>);
  set(OpId::atanh, floatUnaryKernel<OpId::atanh>);
  set(OpId::floor, floatUnaryKernel<OpId::floor>);
  set(OpId::ceil, floatUnaryKernel<OpId::ceil>);
  set(OpId::round, floatUnaryKernel<OpId::round>);
  set(OpId::tanh, floatUnaryKernel<OpId::tanh>);
  set(OpId::sigmoid, floatUnaryKernel<OpId::sigmoid>);
  set(OpId::gelu, floatUnaryKernel<OpId::gelu>);
  set(OpId::neg, numericUnaryKernel<OpId::neg>);
  set(OpId::relu, numericUnaryKernel<OpId::relu>);
  set(OpId::clip, clipKernel);
  set(OpId::cast, castKernel);
  set(OpId::where, whereKernel);
  set(OpId::dropout, copyKernel);
  set(OpId::identity, copyKernel);
  set(OpId::detach, copyKernel);
}

}  // namespace cleave::runtime::cuda
