// Helpers for the CPU kernel tests: host tensors, running one kernel, reference indexing, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "runtime/device/element_access.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime::kernel_test {

// A tensor in host memory; elements are read and written as doubles through element_access.
struct HostTensor {
  TensorType type;
  std::vector<double> storage;  // 8-byte aligned bytes, at least type.bytes() of them

  HostTensor() = default;
  explicit HostTensor(TensorType t)
      : type(std::move(t)), storage(static_cast<size_t>((type.bytes() + 7) / 8 + 1), 0.0) {}

  void* bytes() { return storage.data(); }
  const void* bytes() const { return storage.data(); }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(storage.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(storage.data());
  }
  int64_t numel() const { return type.numel(); }
  double at(int64_t i) const { return loadElement(type.dtype, bytes(), i); }
  void set(int64_t i, double value) { storeElement(type.dtype, bytes(), i, value); }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[i] = at(i);
    return v;
  }
};

inline HostTensor makeTensor(DType dtype, Shape shape, const std::vector<double>& values) {
  HostTensor t(TensorType{dtype, std::move(shape)});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel()) << "makeTensor: wrong number of values";
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i) t.set(i, values[i]);
  return t;
}

// Uniform random floats in [low, high).
inline HostTensor randomTensor(DType dtype, Shape shape, std::mt19937& rng, double low = -1.0, double high = 1.0) {
  HostTensor t(TensorType{dtype, std::move(shape)});
  std::uniform_real_distribution<double> dist(low, high);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
  return t;
}

// Uniform random integers in [low, high].
inline HostTensor randomIntTensor(DType dtype, Shape shape, std::mt19937& rng, int64_t low, int64_t high) {
  HostTensor t(TensorType{dtype, std::move(shape)});
  std::uniform_int_distribution<int64_t> dist(low, high);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(dist(rng)));
  return t;
}

// Runs op's CPU kernel; the result types come from the op table's shape rule.
inline Expected<std::vector<HostTensor>> runKernel(OpId op, const std::vector<const HostTensor*>& operands,
                                                   const AttrMap& attrs, int threads = 2) {
  std::vector<TensorType> operand_types;
  for (const HostTensor* t : operands) operand_types.push_back(t->type);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> result_types, inferResultTypes(opDef(op), operand_types, attrs));
  std::vector<HostTensor> results;
  for (const TensorType& type : result_types) results.emplace_back(type);
  std::vector<const void*> inputs;
  for (const HostTensor* t : operands) inputs.push_back(t->bytes());
  std::vector<void*> outputs;
  for (HostTensor& t : results) outputs.push_back(t.bytes());
  CpuKernel kernel = findCpuKernel(op);
  if (!kernel) return Status::internal("no cpu kernel for " + std::string(opName(op)));
  KernelCall call{OpContext{opDef(op), operand_types, result_types, attrs}, inputs, outputs, threads};
  CLEAVE_TRY(kernel(call));
  return results;
}

// runKernel, failing the test (and returning no results) on an error.
inline std::vector<HostTensor> run(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs = {},
                                   int threads = 2) {
  auto results = runKernel(op, operands, attrs, threads);
  if (!results) {
    ADD_FAILURE() << opName(op) << ": " << results.status().message();
    return {};
  }
  return std::move(*results);
}

// The row-major multi-index of element `flat` of `shape`.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// The flat offset in `operand` (numpy-broadcast to the result) of the result element at `index`.
inline int64_t broadcastOffset(const std::vector<int64_t>& index, const Shape& operand) {
  const size_t skip = index.size() - operand.size();
  int64_t offset = 0;
  for (size_t d = 0; d < operand.size(); ++d) offset = offset * operand[d] + (operand[d] == 1 ? 0 : index[d + skip]);
  return offset;
}

// Expects |actual − expected| <= atol + rtol·|expected| elementwise (NaNs must match NaNs).
inline void expectClose(const HostTensor& actual, const std::vector<double>& expected, double rtol, double atol,
                        const std::string& what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  int reported = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = actual.at(i), e = expected[i];
    const bool ok = (std::isnan(e) && std::isnan(a)) || a == e || std::abs(a - e) <= atol + rtol * std::abs(e);
    if (!ok && reported++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
  }
}

// Expects two tensors to hold the same bytes (for thread-count independence).
inline void expectIdentical(const HostTensor& a, const HostTensor& b, const std::string& what) {
  ASSERT_EQ(a.type, b.type) << what;
  const auto* pa = static_cast<const uint8_t*>(a.bytes());
  const auto* pb = static_cast<const uint8_t*>(b.bytes());
  EXPECT_TRUE(std::equal(pa, pa + a.type.bytes(), pb)) << what << ": results differ between thread counts";
}

// Central finite differences of Σ weights · f(x) with respect to every element of x (f64 tensors):
// f returns f's result for the given x.
inline std::vector<double> finiteDifferenceGradient(HostTensor x, const std::vector<double>& weights,
                                                    const std::function<HostTensor(const HostTensor&)>& f,
                                                    double step = 1e-6) {
  std::vector<double> gradient(static_cast<size_t>(x.numel()));
  auto objective = [&](const HostTensor& at) {
    const HostTensor y = f(at);
    double sum = 0;
    for (int64_t i = 0; i < y.numel(); ++i) sum += weights[i] * y.at(i);
    return sum;
  };
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double original = x.at(i);
    x.set(i, original + step);
    const double plus = objective(x);
    x.set(i, original - step);
    const double minus = objective(x);
    x.set(i, original);
    gradient[i] = (plus - minus) / (2 * step);
  }
  return gradient;
}

inline AttrMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> list) { return AttrMap(list); }

}  // namespace cleave::runtime::kernel_test
