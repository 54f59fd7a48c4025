// Math the CPU kernels' loops use and compilers vectorise: exp, tanh, erf and sigmoid (for f32,
// branch-free approximations of about 1-2 ulp, erf within 2e-7 absolute, where libm's are one call
// per element; for f64, the <cmath> functions), and sums and maxima in a fixed order.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace cleave::runtime::cpu {

// Inlined into the loops that use it even when large: a call inside a loop stops vectorisation.
#define CLEAVE_INLINE [[gnu::always_inline]] inline

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// body() built a second time for AVX2 and FMA: everything it calls is inlined into this clone.
template <class Body>
[[gnu::target("avx2,fma"), gnu::flatten]] void runBuiltForAvx2(const Body& body) {
  body();
}

inline bool cpuHasAvx2AndFma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

// Runs body() built for AVX2 and FMA when the CPU has them (twice the vector width, fused
// multiply-adds), else as built for the baseline instruction set; for loops heavy in arithmetic. The
// two may differ in the last bits (fused multiply-adds round once).
template <class Body>
CLEAVE_INLINE void withWidestVectors(const Body& body) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpuHasAvx2AndFma()) {
    runBuiltForAvx2(body);
    return;
  }
#endif
  body();
}

// e^x for float: x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite), e^r by Cephes' expf polynomial, 2^n
// built in the exponent bits as two factors so that results down to the subnormal range round once.
CLEAVE_INLINE float expFloat(float x) {
  // Beyond [-104, 89] the result is 0 or inf. Below -104 (a masked attention score) and for a NaN
  // the arithmetic runs on 0, whose steps stay normal (subnormal intermediates cost a microcode
  // assist each), and the result is chosen at the end. (Plain selects rather than std::min/max,
  // whose references to constants stop vectorisation.)
  const bool is_nan = x != x;
  const bool underflows = x < -104.0f;
  float clamped = x > 89.0f ? 89.0f : x;
  clamped = is_nan || underflows ? 0.0f : clamped;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding and subtracting it rounds to an integer
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n);  // in [-150, 128]
  const int32_t half = exponent >> 1;
  const float scale_low = std::bit_cast<float>((half + 127) << 23);
  const float scale_high = std::bit_cast<float>((exponent - half + 127) << 23);
  const float result = p * scale_low * scale_high;
  return is_nan ? x : underflows ? 0.0f : result;
}

// tanh for float: Cephes' odd polynomial for |x| < 0.625, else 1 − 2/(e^{2|x|} + 1) with x's sign.
CLEAVE_INLINE float tanhFloat(float x) {
  const float z = x * x;
  float small = -5.70498872745e-3f;
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * x + x;
  const float magnitude = 1.0f - 2.0f / (expFloat(2.0f * std::abs(x)) + 1.0f);
  const float large = x < 0.0f ? -magnitude : magnitude;
  return std::abs(x) < 0.625f ? small : large;
}

// erf for float: its Taylor series to x^13 for |x| < 0.5; else 1 − erfc(|x|) with x's sign, erfc by
// Numerical Recipes' Chebyshev fit t·exp(−x² + P(t)), t = 1/(1 + |x|/2) (fractional error < 1.2e-7).
CLEAVE_INLINE float erfFloat(float x) {
  // The series' coefficients are 2/√π · (−1)^k / (k!·(2k+1)), k = 6 down to 1; the k = 0 term
  // 2/√π·x is added as x + 0.128…·x, which keeps the rounding error of the sum near half an ulp.
  const float z = x * x;
  float tail = 1.2055332981e-4f;
  tail = tail * z - 8.5483270768e-4f;
  tail = tail * z + 5.2239776254e-3f;
  tail = tail * z - 2.6866170645e-2f;
  tail = tail * z + 1.1283791671e-1f;
  tail = tail * z - 3.7612638903e-1f;
  tail = tail * z + 1.2837916709551257e-1f;
  const float series = x + x * tail;
  const float a = std::abs(x);
  const float t = 1.0f / (1.0f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float complement = t * expFloat(p - a * a);
  const float magnitude = 1.0f - complement;
  const float large = x < 0.0f ? -magnitude : magnitude;
  return a < 0.5f ? series : large;
}

// The functions the kernels use, by element type.
template <class T>
CLEAVE_INLINE T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) return expFloat(x);
  else return std::exp(x);
}
template <class T>
CLEAVE_INLINE T vtanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanhFloat(x);
  else return std::tanh(x);
}
template <class T>
CLEAVE_INLINE T verf(T x) {
  if constexpr (std::is_same_v<T, float>) return erfFloat(x);
  else return std::erf(x);
}
// 1 / (1 + e^{−x}).
template <class T>
CLEAVE_INLINE T vsigmoid(T x) {
  return T(1) / (T(1) + vexp(-x));
}

// Σ_{i<n} term(i) in double, as 8 interleaved partial sums that compilers vectorise (one running
// sum cannot be reordered without -ffast-math); the order is fixed, so results repeat exactly.
template <class Term>
CLEAVE_INLINE double sumOf(int64_t n, Term&& term) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(term(i + j));
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(term(i));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// The largest of x[0..n) (−inf when n is 0). NaNs may be missed: callers let them propagate
// through the arithmetic that follows (x − max is NaN for a NaN x).
template <class T>
CLEAVE_INLINE T maxOf(const T* x, int64_t n) {
  constexpr int kLanes = 8;
  T lanes[kLanes];
  for (T& lane : lanes) lane = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  T max = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  for (T lane : lanes) max = lane > max ? lane : max;
  return max;
}

}  // namespace cleave::runtime::cpu
