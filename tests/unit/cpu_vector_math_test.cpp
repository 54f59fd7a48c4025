// Tests of the CPU kernels' float approximations of exp, tanh and erf against double-precision libm,
// over dense ranges and the special values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/cpu/cpu_vector_math.h"

namespace cleave::runtime::cpu {
namespace {

// Distance in float ulps between `actual` and the correctly rounded float of `exact`.
double ulpError(float actual, double exact) {
  const float rounded = static_cast<float>(exact);
  if (actual == rounded) return 0;
  const double ulp = std::abs(static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity())) -
                              static_cast<double>(rounded));
  return std::abs(static_cast<double>(actual) - exact) / (ulp > 0 ? ulp : std::numeric_limits<float>::denorm_min());
}

// fn over `count` + 1 floats evenly spread over [low, high], computed in a loop built as the kernels'
// are (withWidestVectors: the AVX2 and FMA build where the CPU has them); check(x, fn(x)) per value.
template <class Fn, class Check>
void sweep(float low, float high, int count, Fn fn, Check&& check) {
  std::vector<float> inputs(static_cast<size_t>(count) + 1), outputs(inputs.size());
  for (int i = 0; i <= count; ++i) inputs[i] = low + (high - low) * static_cast<float>(i) / static_cast<float>(count);
  const float* in = inputs.data();
  float* out = outputs.data();
  const int64_t n = static_cast<int64_t>(inputs.size());
  withWidestVectors([&] {
    for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);
  });
  for (size_t i = 0; i < inputs.size(); ++i) check(inputs[i], outputs[i]);
}

TEST(CpuVectorMath, ExpIsWithinTwoUlps) {
  double worst = 0;
  sweep(-87.0f, 88.5f, 2000000, [](float x) { return expFloat(x); },
        [&](float x, float y) { worst = std::max(worst, ulpError(y, std::exp(double{x}))); });
  EXPECT_LE(worst, 2.0);
  // Subnormal results, overflow, underflow and the special values.
  EXPECT_NEAR(expFloat(-100.0f), std::exp(-100.0), 2 * std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(expFloat(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(expFloat(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(expFloat(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(expFloat(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(expFloat(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(expFloat(0.0f), 1.0f);
}

TEST(CpuVectorMath, TanhIsWithinTwoUlps) {
  double worst = 0;
  auto check = [&](float x, float y) { worst = std::max(worst, ulpError(y, std::tanh(double{x}))); };
  sweep(-10.0f, 10.0f, 2000000, [](float x) { return tanhFloat(x); }, check);
  sweep(-1e-3f, 1e-3f, 100000, [](float x) { return tanhFloat(x); }, check);
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(tanhFloat(100.0f), 1.0f);
  EXPECT_EQ(tanhFloat(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(tanhFloat(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuVectorMath, ErfIsWithinTwoUlpsOrTwoTenMillionths) {
  double worst_absolute = 0, worst_small = 0;
  sweep(-6.0f, 6.0f, 2000000, [](float x) { return erfFloat(x); }, [&](float x, float y) {
    worst_absolute = std::max(worst_absolute, std::abs(static_cast<double>(y) - std::erf(double{x})));
  });
  // Near zero, where erf is small, the error is relative: the series is used there.
  sweep(-0.5f, 0.5f, 1000000, [](float x) { return erfFloat(x); },
        [&](float x, float y) { worst_small = std::max(worst_small, ulpError(y, std::erf(double{x}))); });
  EXPECT_LE(worst_absolute, 2e-7);
  EXPECT_LE(worst_small, 2.0);
  EXPECT_EQ(erfFloat(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(erfFloat(-30.0f), -1.0f);
  EXPECT_TRUE(std::isnan(erfFloat(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuVectorMath, SumsAndMaximaInAFixedOrder) {
  float values[21];
  for (int i = 0; i < 21; ++i) values[i] = static_cast<float>(i % 7) - 2.5f;
  double expected = 0;
  for (float v : values) expected += v;
  EXPECT_EQ(sumOf(21, [&](int64_t i) { return values[i]; }), expected);
  EXPECT_EQ(sumOf(0, [&](int64_t i) { return values[i]; }), 0.0);
  EXPECT_EQ(maxOf(values, 21), 3.5f);
  EXPECT_EQ(maxOf(values, 0), -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace cleave::runtime::cpu
