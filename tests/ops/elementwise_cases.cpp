// Harness cases of the elementwise family (ir/ops/elementwise.cpp): arithmetic with broadcasting,
// comparisons, unary math, clip, cast, where, dropout and identity, in floats and integers.
#include <cmath>
#include <limits>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList elementwiseCases() {
  CaseBuilder b(101);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<Shape, Shape>> broadcasts = {
      {{3, 1, 5}, {4, 1}}, {{7}, {}},         {{}, {2, 3}},  {{2, 3, 4}, {2, 3, 4}}, {{1, 6}, {5, 1}},
      {{2, 1, 3, 1}, {1, 4, 1, 5}}, {{4, 1, 5}, {1, 7, 1}}, {{1037}, {1}}, {{0, 3}, {3}}};
  for (const auto& [sa, sb] : broadcasts) {
    const std::string shapes = shapeStr(sa) + " x " + shapeStr(sb);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      for (OpId op : {OpId::add, OpId::sub, OpId::mul, OpId::div})
        b.add(op, "broadcast " + shapes, {b.uniform(dtype, sa, -2, 2), b.uniform(dtype, sb, 0.5, 2.0)});
      b.add(OpId::pow, "broadcast " + shapes, {b.uniform(dtype, sa, 0.5, 2.0), b.uniform(dtype, sb, -1, 1)});
    }
    for (OpId op : {OpId::add, OpId::sub, OpId::mul, OpId::div}) {
      b.add(op, "i64 broadcast " + shapes, {b.integers(DType::kI64, sa, -50, 50), b.integers(DType::kI64, sb, 1, 9)});
      b.add(op, "i32 broadcast " + shapes, {b.integers(DType::kI32, sa, -50, 50), b.integers(DType::kI32, sb, -9, -1)});
    }
    b.add(OpId::pow, "i64 broadcast " + shapes, {b.integers(DType::kI64, sa, -3, 3), b.integers(DType::kI64, sb, 0, 5)});
    for (OpId op : {OpId::equal, OpId::less, OpId::less_equal, OpId::greater, OpId::greater_equal}) {
      b.add(op, "f32 " + shapes, {b.uniform(DType::kF32, sa), b.uniform(DType::kF32, sb)});
      b.add(op, "i64 " + shapes, {b.integers(DType::kI64, sa, 0, 3), b.integers(DType::kI64, sb, 0, 3)});
    }
    b.add(OpId::equal, "bool " + shapes, {b.integers(DType::kBool, sa, 0, 1), b.integers(DType::kBool, sb, 0, 1)});
  }
  // A one-element exponent that is a small whole or half number takes the kernels' multiplying path.
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (double exponent : {-4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0}) {
      const bool half = exponent != std::floor(exponent);
      const std::string label = "exponent " + std::to_string(exponent).substr(0, 4);
      b.add(OpId::pow, label, {b.uniform(dtype, {3, 129}, 0.25, 3), CaseBuilder::values(dtype, {}, {exponent})});
      if (!half)
        b.addWithoutGradient(OpId::pow, label + " negative bases",
                             {b.uniform(dtype, {3, 129}, -3, -0.25), CaseBuilder::values(dtype, {1}, {exponent})}, {},
                             "the exponent's gradient needs log(base)");
      b.addWithoutGradient(OpId::pow, label + " special values",
                           {CaseBuilder::values(dtype, {8}, {-inf, -2, -0.0, 0, 1, inf, nan, 7}), CaseBuilder::values(dtype, {1}, {exponent})},
                           {}, "infinities and NaN have no finite differences");
    }
    b.add(OpId::pow, "exponent 4.5 (beyond the multiplying path)", {b.uniform(dtype, {37}, 0.5, 2), CaseBuilder::values(dtype, {}, {4.5})});
  }
  const TensorData with_nan = CaseBuilder::values(DType::kF32, {2, 3}, {1, 2, 3, nan, 5, 6});
  const TensorData nan_row = CaseBuilder::values(DType::kF32, {3}, {2, 2, nan});
  for (OpId op : {OpId::equal, OpId::less, OpId::less_equal, OpId::greater, OpId::greater_equal})
    b.add(op, "NaN compares false", {with_nan, nan_row});
  b.add(OpId::add, "NaN propagates", {with_nan, nan_row});

  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 129}, Shape{0, 4}}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const std::string label = shapeStr(shape);
      for (OpId op : {OpId::exp, OpId::neg, OpId::erf, OpId::tanh, OpId::sigmoid, OpId::gelu, OpId::identity,
                      OpId::detach})
        b.add(op, label, {b.uniform(dtype, shape, -3, 3)});
      for (OpId op : {OpId::sin, OpId::cos}) {
        b.add(op, label, {b.uniform(dtype, shape, -3.5, 3.5)});
        b.add(op, label + " large arguments", {b.uniform(dtype, shape, -1000, 1000)});
      }
      // The rest of the trigonometric family, each on its domain (away from its poles).
      for (OpId op : {OpId::atan, OpId::sinh, OpId::cosh, OpId::asinh}) b.add(op, label, {b.uniform(dtype, shape, -3, 3)});
      for (OpId op : {OpId::asin, OpId::acos, OpId::atanh}) b.add(op, label, {b.uniform(dtype, shape, -0.9, 0.9)});
      b.add(OpId::tan, label, {b.uniform(dtype, shape, -1.2, 1.2)});
      b.add(OpId::acosh, label, {b.uniform(dtype, shape, 1.1, 4)});
      // floor, ceil and round away from their steps (a finite difference across one is not a gradient);
      // round's halves go to even, as numpy's and PyTorch's.
      std::vector<double> off_steps;
      for (int64_t i = 0; i < TensorType{dtype, shape}.numel(); ++i) off_steps.push_back(static_cast<double>(i % 13) - 6 + (i % 2 ? 0.3 : 0.7));
      for (OpId op : {OpId::floor, OpId::ceil, OpId::round}) b.add(op, label, {CaseBuilder::values(dtype, shape, off_steps)});
      b.addWithoutGradient(OpId::round, label + " halves", {CaseBuilder::values(dtype, Shape{6}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5})}, {},
                           "round jumps at halves");
      b.add(OpId::dropout, label + " ratio 0", {b.uniform(dtype, shape, -3, 3)}, {{"ratio", 0.0}});
      b.addWithoutGradient(OpId::dropout, label + " at inference", {b.uniform(dtype, shape, -3, 3)}, {},
                           "dropout with ratio > 0 is not differentiable yet (its rule says so)");
      b.add(OpId::relu, label + " away from the kink", {b.awayFromZero(dtype, shape, 0.1, 3)});
      b.add(OpId::gelu, label + " tanh approximation", {b.uniform(dtype, shape, -3, 3)}, {{"approximate", std::string("tanh")}});
      b.add(OpId::sqrt, label, {b.uniform(dtype, shape, 0.1, 4)});
      b.add(OpId::log, label, {b.uniform(dtype, shape, 0.1, 4)});
      b.add(OpId::clip, label, {b.uniform(dtype, shape, -2, 2)}, {{"min", -0.5}, {"max", 1.25}});
    }
    const std::string label = shapeStr(shape);
    b.add(OpId::neg, "i64 " + label, {b.integers(DType::kI64, shape, -100, 100)});
    b.add(OpId::relu, "i32 " + label, {b.integers(DType::kI32, shape, -100, 100)});
    b.add(OpId::clip, "i64 " + label, {b.integers(DType::kI64, shape, -100, 100)}, {{"min", -7.5}, {"max", 30.2}});
    const TensorData x = b.uniform(DType::kF32, shape, -3, 3);
    for (const char* to : {"i32", "bool", "f16", "bf16", "f64"}) b.add(OpId::cast, std::string("to ") + to, {x}, {{"to", std::string(to)}});
    b.add(OpId::cast, "i64 to f32", {b.integers(DType::kI64, shape, -100, 100)}, {{"to", std::string("f32")}});
    b.add(OpId::cast, "i32 to i64", {b.integers(DType::kI32, shape, -100, 100)}, {{"to", std::string("i64")}});
    b.add(OpId::cast, "f64 to f32", {b.uniform(DType::kF64, shape)}, {{"to", std::string("f32")}});
    const TensorData cond = b.integers(DType::kBool, shape, 0, 1);
    b.add(OpId::where, "broadcast y " + label, {cond, b.uniform(DType::kF32, shape), b.uniform(DType::kF32, {1})});
    b.add(OpId::where, "f64 " + label, {cond, b.uniform(DType::kF64, shape), b.uniform(DType::kF64, shape)});
    b.add(OpId::where, "i64 " + label, {cond, b.integers(DType::kI64, shape, -9, 9), b.integers(DType::kI64, shape, -9, 9)});
  }
  b.add(OpId::where, "all three broadcast",
        {b.integers(DType::kBool, {2, 1, 4}, 0, 1), b.uniform(DType::kF32, {3, 1}), b.uniform(DType::kF32, {4})});
  for (OpId op : {OpId::exp, OpId::neg, OpId::tanh, OpId::sigmoid, OpId::relu, OpId::sqrt, OpId::sin, OpId::cos, OpId::tan,
                  OpId::atan, OpId::sinh, OpId::floor, OpId::ceil, OpId::round})
    b.add(op, "NaN propagates", {CaseBuilder::values(DType::kF32, {3}, {nan, 1, 0.5})});
  b.add(OpId::clip, "NaN passes clip", {CaseBuilder::values(DType::kF64, {3}, {nan, -4, 4})}, {{"min", -1.0}, {"max", 1.0}});
  for (OpId op : {OpId::add, OpId::mul, OpId::exp, OpId::gelu}) {
    const TensorData big = b.uniform(DType::kF32, {1024, 1024}, -2, 2);
    std::vector<TensorData> operands = {big};
    if (op == OpId::add || op == OpId::mul) operands.push_back(b.uniform(DType::kF32, {1024}, -2, 2));
    b.add(op, "large (perf)", operands).perf = true;
  }
  // The kernels of these ops are within an ulp or two of the reference: hold them to that, tighter
  // than the harness's default.
  CaseList cases = b.take();
  for (OpCase& c : cases) {
    if (c.tolerance || c.operands.empty()) continue;
    const bool f32 = c.operands[0].type.dtype == DType::kF32, f64 = c.operands[0].type.dtype == DType::kF64;
    if (!f32 && !f64) continue;
    switch (c.op) {
      case OpId::add:
      case OpId::sub:
      case OpId::mul:
      case OpId::div:
      case OpId::pow: c.tolerance = f32 ? Tolerance{1e-6, 0} : Tolerance{1e-14, 0}; break;
      case OpId::sqrt:
      case OpId::exp:
      case OpId::log:
      case OpId::neg:
      case OpId::erf:
      case OpId::tanh:
      case OpId::sigmoid:
      case OpId::relu:
      case OpId::gelu: c.tolerance = f32 ? Tolerance{3e-6, 1e-6} : Tolerance{1e-13, 1e-15}; break;
      default: break;
    }
  }
  return cases;
}

}  // namespace cleave::op_harness
