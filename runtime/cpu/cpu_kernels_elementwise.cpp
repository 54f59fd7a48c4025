// CPU kernels of the elementwise ops: arithmetic, comparisons, unary math, clip, cast, where,
// dropout and identity (numpy broadcasting; results may alias same-shaped operands).
#include <atomic>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>

#include "ir/ops/float_to_integer.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"
#include "runtime/device/element_access.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element (for parallelFor) of a plain arithmetic op and of a transcendental function.
constexpr int64_t kSimpleWork = 1;
constexpr int64_t kTranscendentalWork = 16;

// ---- Integer arithmetic wraps around (two's complement), as constant folding does ----

template <class T>
using Unsigned = std::make_unsigned_t<T>;

template <class T>
T wrappingAdd(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
}
template <class T>
T wrappingSub(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
}
template <class T>
T wrappingMul(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
}

// base^exponent for integers: exact (wrapping) for exponent >= 0; for a negative exponent the
// truncated value of 1/base^|exponent| (the caller rejects base 0).
template <class T>
T integerPow(T base, T exponent) {
  if (exponent < 0) return base == 1 ? T{1} : base == T(-1) ? (exponent % 2 == 0 ? T{1} : T(-1)) : T{0};
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = wrappingMul(result, base);
    base = wrappingMul(base, base);
    exponent = static_cast<T>(exponent >> 1);
  }
  return result;
}

// ---- Broadcasting loops ----

// result = op(a, b) elementwise with numpy broadcasting; R is the result's element type.
template <class T, class R, class Op>
void broadcastBinary(const KernelCall& call, int64_t work_per_element, Op op) {
  const Shape& a_shape = call.op.operands[0].shape;
  const Shape& b_shape = call.op.operands[1].shape;
  const Shape& out_shape = call.op.results[0].shape;
  const T* a = call.in<T>(0);
  const T* b = call.in<T>(1);
  R* out = call.out<R>(0);
  const int64_t n = call.op.results[0].numel();
  const int threads = threadCount(call);
  if (a_shape == out_shape && b_shape == out_shape) {
    parallelFor(n, threads, work_per_element, [&](int64_t begin, int64_t end) {
      const T* pa = a;  // local copies, as in mapUnary
      const T* pb = b;
      R* po = out;
      const Op f = op;
      for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  const BroadcastLayout layout = makeBroadcastLayout(out_shape, {&a_shape, &b_shape});
  const bool a_steps = layout.steps(0), b_steps = layout.steps(1);
  parallelFor(n, threads, work_per_element, [&](int64_t begin, int64_t end) {
    const Op f = op;
    forEachSegment<2>(layout, begin, end, [&](int64_t at, const std::array<int64_t, 2>& from, int64_t length) {
      const T* pa = a + from[0];
      const T* pb = b + from[1];
      R* po = out + at;
      if (a_steps && b_steps) {
        for (int64_t i = 0; i < length; ++i) po[i] = f(pa[i], pb[i]);
      } else if (a_steps) {
        const T vb = *pb;
        for (int64_t i = 0; i < length; ++i) po[i] = f(pa[i], vb);
      } else if (b_steps) {
        const T va = *pa;
        for (int64_t i = 0; i < length; ++i) po[i] = f(va, pb[i]);
      } else {
        std::fill_n(po, length, static_cast<R>(f(*pa, *pb)));
      }
    });
  });
}

// y = fn(x) elementwise over same-shaped tensors.
template <class T, class Fn>
void mapUnary(const KernelCall& call, int64_t work_per_element, Fn fn) {
  const T* x = call.in<T>(0);
  T* y = call.out<T>(0);
  parallelFor(call.op.results[0].numel(), threadCount(call), work_per_element, [&](int64_t begin, int64_t end) {
    // Local copies: a loop that reloads its pointers or function object from the closure is not
    // vectorised.
    const T* in = x;
    T* out = y;
    const Fn f = fn;
    withWidestVectors([&] {
      for (int64_t i = begin; i < end; ++i) out[i] = f(in[i]);
    });
  });
}

// ---- Arithmetic: add, sub, mul, div, pow ----

// Exponents of float pow with a fast path: the halves from -kMaxTwiceExponent/2 to
// +kMaxTwiceExponent/2 (x^2 in RMSNorm and pow's own gradient, x^3 in GPT-2's tanh-GELU, x^0.5).
constexpr int kMaxTwiceExponent = 8;

// x^(kTwice/2) by multiplications (and one sqrt for a half): no libm call, so the loop vectorises.
// Agrees with std::pow within a few ulp; special values as std::pow: x^0 = 1 for every x, a
// negative base to a half power is NaN (sqrt's), and (-inf)^(k/2) and (-0)^(k/2) for odd k follow
// pow's sign rules through the selects below.
template <int kTwice, class T>
CLEAVE_INLINE T powByMultiplying(T x) {
  constexpr int kWhole = (kTwice < 0 ? -kTwice : kTwice) / 2;
  constexpr bool kHalf = (kTwice % 2) != 0;
  T result = T(1);
  if constexpr (kWhole > 0) {
    T base = x;
    for (int bits = kWhole;;) {  // square-and-multiply, unrolled: kWhole is a constant
      if (bits & 1) result = result * base;
      bits >>= 1;
      if (bits == 0) break;
      base = base * base;
    }
  }
  if constexpr (kHalf) {
    // pow(-inf, k/2) is +inf (sqrt would give NaN); pow(-0, k/2) is +0 (sqrt gives -0).
    const T root = x == -std::numeric_limits<T>::infinity() ? std::numeric_limits<T>::infinity() : std::sqrt(x) + T(0);
    result = result * root;
  }
  if constexpr (kTwice < 0) result = T(1) / result;
  return result;
}

// Runs broadcastBinary for a float pow whose exponent is one element equal to a small whole or
// half number, with that exponent's multiplications; returns false (nothing done) otherwise.
template <class T>
bool powWithSmallExponent(const KernelCall& call) {
  if (call.op.operands[1].numel() != 1) return false;
  const T exponent = *call.in<T>(1);
  const T twice = exponent * T(2);
  if (!(twice == std::nearbyint(twice)) || std::abs(twice) > T(kMaxTwiceExponent)) return false;
  bool done = false;
  [&]<int... kOffsets>(std::integer_sequence<int, kOffsets...>) {
    ((static_cast<int>(twice) == kOffsets - kMaxTwiceExponent
          ? (broadcastBinary<T, T>(call, kSimpleWork * 4,
                                   [](T a, T) { return powByMultiplying<kOffsets - kMaxTwiceExponent>(a); }),
             done = true)
          : false),
     ...);
  }(std::make_integer_sequence<int, 2 * kMaxTwiceExponent + 1>{});
  return done;
}

// Integer division by zero is an error; the check runs before any result is written.
template <class T>
Status checkNoZeroDivisor(const KernelCall& call) {
  const T* divisor = call.in<T>(1);
  const int64_t count = call.op.operands[1].numel();
  for (int64_t i = 0; i < count; ++i)
    if (divisor[i] == T{0})
      return Status::badInput("div: integer division by zero (element " + std::to_string(i) + " of operand 1)");
  return Status::ok();
}

template <OpId kOp>
Status arithmeticKernel(const KernelCall& call) {
  if (call.op.results[0].numel() == 0) return Status::ok();
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    if constexpr (std::is_floating_point_v<T>) {
      if constexpr (kOp == OpId::add) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return a + b; });
      if constexpr (kOp == OpId::sub) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return a - b; });
      if constexpr (kOp == OpId::mul) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return a * b; });
      if constexpr (kOp == OpId::div) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return a / b; });
      if constexpr (kOp == OpId::pow)
        if (!powWithSmallExponent<T>(call))
          broadcastBinary<T, T>(call, kTranscendentalWork, [](T a, T b) { return std::pow(a, b); });
      return Status::ok();
    } else {
      if constexpr (kOp == OpId::add) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return wrappingAdd(a, b); });
      if constexpr (kOp == OpId::sub) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return wrappingSub(a, b); });
      if constexpr (kOp == OpId::mul) broadcastBinary<T, T>(call, kSimpleWork, [](T a, T b) { return wrappingMul(a, b); });
      if constexpr (kOp == OpId::div) {
        CLEAVE_TRY(checkNoZeroDivisor<T>(call));
        // x / -1 is written as 0 - x so that the most negative value wraps instead of trapping.
        broadcastBinary<T, T>(call, kSimpleWork,
                              [](T a, T b) { return b == T(-1) ? wrappingSub(T{0}, a) : static_cast<T>(a / b); });
      }
      if constexpr (kOp == OpId::pow) {
        std::atomic<bool> zero_to_negative{false};
        broadcastBinary<T, T>(call, kSimpleWork, [&](T a, T b) {
          if (a == T{0} && b < T{0}) {
            zero_to_negative.store(true, std::memory_order_relaxed);
            return T{0};
          }
          return integerPow(a, b);
        });
        if (zero_to_negative.load()) return Status::badInput("pow: zero raised to a negative integer power");
      }
      return Status::ok();
    }
  });
}

// ---- Comparisons (bool results, stored as bytes 0 and 1) ----

template <OpId kOp>
Status comparisonKernel(const KernelCall& call) {
  if (call.op.results[0].numel() == 0) return Status::ok();
  auto run = [&]<class T>(T) -> Status {
    auto compare = [](T a, T b) -> uint8_t {
      if constexpr (kOp == OpId::equal) return a == b;
      else if constexpr (kOp == OpId::less) return a < b;
      else if constexpr (kOp == OpId::less_equal) return a <= b;
      else if constexpr (kOp == OpId::greater) return a > b;
      else return a >= b;  // greater_equal
    };
    broadcastBinary<T, uint8_t>(call, kSimpleWork, compare);
    return Status::ok();
  };
  if (call.op.operands[0].dtype == DType::kBool) return run(uint8_t{});
  return visitNumeric(call, call.op.operands[0].dtype, run);
}

// ---- Unary math ----

// gelu as PyTorch writes it: x·Φ(x) with erf, or the tanh approximation.
template <class T>
CLEAVE_INLINE T geluExact(T x) {
  return x * T(0.5) * (T(1) + verf(x * T(std::numbers::sqrt2 / 2)));
}
template <class T>
CLEAVE_INLINE T geluTanh(T x) {
  const T beta = T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
  const T kappa = T(0.044715);
  const T cube = x * x * x;
  return T(0.5) * x * (T(1) + vtanh(beta * (x + kappa * cube)));
}

template <OpId kOp>
Status floatUnaryKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    if constexpr (kOp == OpId::sqrt) mapUnary<T>(call, kSimpleWork, [](T x) { return std::sqrt(x); });
    if constexpr (kOp == OpId::exp) mapUnary<T>(call, kTranscendentalWork, [](T x) { return vexp(x); });
    if constexpr (kOp == OpId::log) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::log(x); });
    if constexpr (kOp == OpId::erf) mapUnary<T>(call, kTranscendentalWork, [](T x) { return verf(x); });
    if constexpr (kOp == OpId::sin) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::sin(x); });
    if constexpr (kOp == OpId::cos) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::cos(x); });
    if constexpr (kOp == OpId::tan) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::tan(x); });
    if constexpr (kOp == OpId::asin) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::asin(x); });
    if constexpr (kOp == OpId::acos) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::acos(x); });
    if constexpr (kOp == OpId::atan) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::atan(x); });
    if constexpr (kOp == OpId::sinh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::sinh(x); });
    if constexpr (kOp == OpId::cosh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::cosh(x); });
    if constexpr (kOp == OpId::asinh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::asinh(x); });
    if constexpr (kOp == OpId::acosh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::acosh(x); });
    if constexpr (kOp == OpId::atanh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return std::atanh(x); });
    if constexpr (kOp == OpId::floor) mapUnary<T>(call, kSimpleWork, [](T x) { return std::floor(x); });
    if constexpr (kOp == OpId::ceil) mapUnary<T>(call, kSimpleWork, [](T x) { return std::ceil(x); });
    if constexpr (kOp == OpId::round) mapUnary<T>(call, kSimpleWork, [](T x) { return std::nearbyint(x); });
    if constexpr (kOp == OpId::tanh) mapUnary<T>(call, kTranscendentalWork, [](T x) { return vtanh(x); });
    if constexpr (kOp == OpId::sigmoid) mapUnary<T>(call, kTranscendentalWork, [](T x) { return vsigmoid(x); });
    if constexpr (kOp == OpId::gelu) {
      if (call.op.getString("approximate") == "tanh")
        mapUnary<T>(call, kTranscendentalWork, [](T x) { return geluTanh(x); });
      else
        mapUnary<T>(call, kTranscendentalWork, [](T x) { return geluExact(x); });
    }
    return Status::ok();
  });
}

Status negKernel(const KernelCall& call) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    if constexpr (std::is_floating_point_v<T>)
      mapUnary<T>(call, kSimpleWork, [](T x) { return -x; });
    else
      mapUnary<T>(call, kSimpleWork, [](T x) { return wrappingSub(T{0}, x); });
    return Status::ok();
  });
}

// relu keeps NaN (as PyTorch's clamp_min).
Status reluKernel(const KernelCall& call) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    mapUnary<T>(call, kSimpleWork, [](T x) { return x < T{0} ? T{0} : x; });
    return Status::ok();
  });
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

// clip: min(max(x, lo), hi); a NaN stays NaN.
Status clipKernel(const KernelCall& call) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const T lo = clipBound<T>(call.op.getFloat("min"), true);
    const T hi = clipBound<T>(call.op.getFloat("max"), false);
    mapUnary<T>(call, kSimpleWork, [lo, hi](T x) {
      const T raised = x < lo ? lo : x;
      return raised > hi ? hi : raised;
    });
    return Status::ok();
  });
}

// ---- cast ----

// Storage types of the dtypes that are not plain C++ arithmetic types.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Bool {
  uint8_t byte;
};

// Calls fn(S{}) with the storage type of any dtype.
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
    case DType::kF16: return fn(Half{});
    case DType::kBF16: return fn(BFloat16{});
  }
  return Status::internal("cast: unknown dtype");
}

// A stored element as an arithmetic value: f16 and bf16 widen to float, bool gives 0 or 1.
template <class S>
auto widen(S s) {
  if constexpr (std::is_same_v<S, Half>) return halfToFloat(s.bits);
  else if constexpr (std::is_same_v<S, BFloat16>) return bfloat16ToFloat(s.bits);
  else if constexpr (std::is_same_v<S, Bool>) return static_cast<uint8_t>(s.byte != 0);
  else return s;
}

// Stores an arithmetic value as D: anything to bool is "≠ 0"; float to integer as PyTorch does it
// (ir/ops/float_to_integer.h); integer to integer wraps; the rest round to nearest.
template <class D, class V>
D narrow(V value) {
  D out;
  if constexpr (std::is_same_v<D, Bool>) {
    out.byte = value != V{0};
  } else if constexpr (std::is_same_v<D, Half>) {
    out.bits = floatToHalf(static_cast<float>(value));
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    out.bits = floatToBfloat16(static_cast<float>(value));
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    out = floatToInteger<D>(static_cast<double>(value));
  } else {
    out = static_cast<D>(value);
  }
  return out;
}

Status castKernel(const KernelCall& call) {
  const DType from_dtype = call.op.operands[0].dtype, to_dtype = call.op.results[0].dtype;
  const int64_t n = call.op.results[0].numel();
  if (from_dtype == to_dtype) {
    parallelCopy(call.outputs[0], call.inputs[0], call.op.results[0].bytes(), threadCount(call));
    return Status::ok();
  }
  return visitStorage(from_dtype, [&]<class From>(From) -> Status {
    return visitStorage(to_dtype, [&]<class To>(To) -> Status {
      const From* in = call.in<From>(0);
      To* out = call.out<To>(0);
      parallelFor(n, threadCount(call), kSimpleWork, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = narrow<To>(widen(in[i]));
      });
      return Status::ok();
    });
  });
}

// ---- where, dropout, identity ----

Status whereKernel(const KernelCall& call) {
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) -> Status {
    const uint8_t* cond = call.in<uint8_t>(0);
    const E* a = call.in<E>(1);
    const E* b = call.in<E>(2);
    E* out = call.out<E>(0);
    const Shape& out_shape = call.op.results[0].shape;
    const BroadcastLayout layout = makeBroadcastLayout(
        out_shape, {&call.op.operands[0].shape, &call.op.operands[1].shape, &call.op.operands[2].shape});
    // Each stride along the innermost dim is 0 (broadcast) or 1.
    const int64_t sc = layout.strides[0].back(), sa = layout.strides[1].back(), sb = layout.strides[2].back();
    parallelFor(n, threadCount(call), kSimpleWork, [&](int64_t begin, int64_t end) {
      forEachSegment<3>(layout, begin, end, [&](int64_t at, const std::array<int64_t, 3>& from, int64_t length) {
        const uint8_t* pc = cond + from[0];
        const E* pa = a + from[1];
        const E* pb = b + from[2];
        E* po = out + at;
        for (int64_t i = 0; i < length; ++i) po[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
      });
    });
    return Status::ok();
  });
}

// identity, and dropout: plans contain dropout only for inference (lowering removes or replaces
// training dropout), where it is the identity, so the kernel copies.
Status copyKernel(const KernelCall& call) {
  parallelCopy(call.outputs[0], call.inputs[0], call.op.results[0].bytes(), threadCount(call));
  return Status::ok();
}

}  // namespace

void registerElementwiseKernels(CpuKernelTable& table) {
  auto set = [&](OpId id, CpuKernel kernel) { table[static_cast<int>(id)] = kernel; };
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
  set(OpId::neg, negKernel);
  set(OpId::relu, reluKernel);
  set(OpId::clip, clipKernel);
  set(OpId::cast, castKernel);
  set(OpId::where, whereKernel);
  set(OpId::dropout, copyKernel);
  set(OpId::identity, copyKernel);
  set(OpId::detach, copyKernel);
}

}  // namespace cleave::runtime::cpu
