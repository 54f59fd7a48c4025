// Harness cases of the reduction family (ir/ops/reduction.cpp): reduce_sum/mean/max over any axes
// (negative, all, none left), softmax and log_softmax along any axis, layer_norm, rms_norm and batch_norm.
#include <cmath>
#include <limits>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList reductionCases() {
  CaseBuilder b(103);
  using Ints = std::vector<int64_t>;
  const std::vector<std::pair<Shape, Ints>> reductions = {{{4, 5, 6}, {1}},  {{4, 5, 6}, {0, 2}}, {{4, 5, 6}, {}},
                                                          {{1000, 3}, {0}},  {{2, 3000}, {1}},   {{3, 1, 70}, {-1}},
                                                          {{2, 3, 4}, {-3, -1}}, {{0, 3}, {1}}, {{5}, {0}},
                                                          {{8, 64, 40}, {0, 1}}};  // a bias gradient: chunks of rows
  for (const auto& [shape, axes] : reductions)
    for (int64_t keepdims : {0, 1})
      for (OpId op : {OpId::reduce_sum, OpId::reduce_mean, OpId::reduce_max}) {
        const AttrMap attrs = {{"axes", axes}, {"keepdims", keepdims}};
        const std::string label = shapeStr(shape) + " axes " + std::to_string(axes.size()) + " keepdims " + std::to_string(keepdims);
        b.add(op, label, {b.uniform(DType::kF32, shape)}, attrs).tolerance = Tolerance{1e-5, 1e-5};
        b.add(op, "f64 " + label, {b.uniform(DType::kF64, shape)}, attrs);
        b.add(op, "i64 " + label, {b.integers(DType::kI64, shape, -1000, 1000)}, attrs);
      }
  b.add(OpId::reduce_sum, "empty sum is zero", {b.uniform(DType::kF32, {0, 4})}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  b.add(OpId::reduce_max, "NaN propagates", {CaseBuilder::values(DType::kF32, {2, 3}, {1, nan, 2, 3, 4, 5})},
        {{"axes", Ints{1}}});
  {  // over 300 rows (chunks of 64 combined in order): a NaN in a later chunk wins
    std::vector<double> column(600, 1.0);
    column[2 * 250 + 1] = nan;
    b.add(OpId::reduce_max, "NaN in a later chunk of rows", {CaseBuilder::values(DType::kF32, {300, 2}, column)},
          {{"axes", Ints{0}}});
  }
  // argmax (no gradient: its result is an index) and cumsum, along each axis of a few shapes.
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{{{4, 5, 6}, 1}, {{4, 5, 6}, -1}, {{7}, 0}, {{3, 1}, 1}}) {
    const std::string label = shapeStr(shape) + " axis " + std::to_string(axis);
    for (int64_t keepdims : {0, 1})
      b.addWithoutGradient(OpId::argmax, label + " keepdims " + std::to_string(keepdims), {b.uniform(DType::kF32, shape)},
                           {{"axis", axis}, {"keepdims", keepdims}}, "its result is an index");
    b.addWithoutGradient(OpId::argmax, "i64 ties go last " + label, {b.integers(DType::kI64, shape, -2, 2)},
                         {{"axis", axis}, {"select_last_index", int64_t{1}}}, "its result is an index");
    b.addWithoutGradient(OpId::argmax, "i32 ties go first " + label, {b.integers(DType::kI32, shape, -2, 2)},
                         {{"axis", axis}}, "its result is an index");
    for (int64_t exclusive : {0, 1})
      for (int64_t reverse : {0, 1}) {
        const AttrMap attrs = {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}};
        const std::string flags = " exclusive " + std::to_string(exclusive) + " reverse " + std::to_string(reverse);
        b.add(OpId::cumsum, label + flags, {b.uniform(DType::kF32, shape)}, attrs).tolerance = Tolerance{1e-5, 1e-5};
        b.add(OpId::cumsum, "f64 " + label + flags, {b.uniform(DType::kF64, shape)}, attrs);
        b.add(OpId::cumsum, "i64 " + label + flags, {b.integers(DType::kI64, shape, -1000, 1000)}, attrs);
      }
  }
  b.addWithoutGradient(OpId::argmax, "NaN is the largest", {CaseBuilder::values(DType::kF32, {2, 3}, {1, nan, 2, 3, 4, nan})},
                       {{"axis", int64_t{1}}}, "its result is an index");
  b.add(OpId::reduce_sum, "large (perf)", {b.uniform(DType::kF32, {1024, 1024})}, {{"axes", Ints{1}}}).perf = true;

  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{4, 37}, -1}, {{3, 5, 7}, 1}, {{2, 1500}, 1}, {{4, 7, 5}, 0}, {{3, 4}, -2}, {{0, 5}, 1}})
    for (OpId op : {OpId::softmax, OpId::log_softmax}) {
      const std::string label = shapeStr(shape) + " axis " + std::to_string(axis);
      b.add(op, label, {b.uniform(DType::kF32, shape, -5, 5)}, {{"axis", axis}});
      b.add(op, "f64 " + label, {b.uniform(DType::kF64, shape, -5, 5)}, {{"axis", axis}});
    }
  for (OpId op : {OpId::softmax, OpId::log_softmax})
    b.add(op, "large logits do not overflow", {CaseBuilder::values(DType::kF32, {2, 3}, {1000, 1, -3, 2, 999, 998})});

  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string dt(dtypeName(dtype));
    b.add(OpId::layer_norm, dt + " [6,33] axis -1",
          {b.uniform(dtype, {6, 33}), b.uniform(dtype, {33}), b.uniform(dtype, {33})});
    b.add(OpId::layer_norm, dt + " [2,3,8] axis 1 without bias", {b.uniform(dtype, {2, 3, 8}), b.uniform(dtype, {3, 8})},
          {{"axis", int64_t{1}}, {"epsilon", 1e-3}});
    b.add(OpId::layer_norm, dt + " [3,4,6] axis -2",
          {b.uniform(dtype, {3, 4, 6}, -3, 3), b.uniform(dtype, {4, 6}), b.uniform(dtype, {4, 6})},
          {{"axis", int64_t{-2}}, {"epsilon", 1e-3}});
    b.add(OpId::rms_norm, dt + " [6,33] axis -1", {b.uniform(dtype, {6, 33}), b.uniform(dtype, {33})});
    b.add(OpId::rms_norm, dt + " [2,3,8] axis 1", {b.uniform(dtype, {2, 3, 8}), b.uniform(dtype, {3, 8})},
          {{"axis", int64_t{1}}, {"epsilon", 1e-3}});
    b.add(OpId::rms_norm, dt + " [70,40] many rows, epsilon 1e-5", {b.uniform(dtype, {70, 40}, -3, 3), b.uniform(dtype, {40})},
          {{"epsilon", 1e-5}});
    b.addWithoutGradient(OpId::rms_norm, dt + " no rows", {b.uniform(dtype, {0, 5}), b.uniform(dtype, {5})}, {}, "no elements");
    // Inference batch_norm treats mean and var as constants: its gradient covers x, scale and bias.
    b.add(OpId::batch_norm, dt + " [2,3,4,5]",
          {b.uniform(dtype, {2, 3, 4, 5}, -2, 2), b.uniform(dtype, {3}), b.uniform(dtype, {3}), b.uniform(dtype, {3}),
           b.uniform(dtype, {3}, 0.5, 2)},
          {{"epsilon", 1e-4}})
        .gradient_operands = {0, 1, 2};
    b.add(OpId::batch_norm, dt + " [4,2] (no spatial dims)",
          {b.uniform(dtype, {4, 2}), b.uniform(dtype, {2}), b.uniform(dtype, {2}), b.uniform(dtype, {2}),
           b.uniform(dtype, {2}, 0.5, 2)})
        .gradient_operands = {0, 1, 2};
  }
  return b.take();
}

}  // namespace cleave::op_harness
