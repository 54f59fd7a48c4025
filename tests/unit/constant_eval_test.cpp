// Unit tests of the constant evaluator against hand-computed results.
#include "ir/constant_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace cleave {
namespace {

template <class T>
TensorData tensor(DType dtype, Shape shape, std::vector<T> elements) {
  TensorData t{TensorType{dtype, std::move(shape)}, std::vector<uint8_t>(elements.size() * sizeof(T))};
  if (!elements.empty()) std::memcpy(t.bytes.data(), elements.data(), t.bytes.size());
  return t;
}
TensorData f32(Shape shape, std::vector<float> e) { return tensor(DType::kF32, std::move(shape), std::move(e)); }
TensorData f64(Shape shape, std::vector<double> e) { return tensor(DType::kF64, std::move(shape), std::move(e)); }
TensorData i64(Shape shape, std::vector<int64_t> e) { return tensor(DType::kI64, std::move(shape), std::move(e)); }
TensorData i32(Shape shape, std::vector<int32_t> e) { return tensor(DType::kI32, std::move(shape), std::move(e)); }
TensorData boolean(Shape shape, std::vector<uint8_t> e) { return tensor(DType::kBool, std::move(shape), std::move(e)); }

template <class T>
std::vector<T> elementsOf(const TensorData& t) {
  std::vector<T> out(t.bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

// Infers the result types with the op table (as a verified graph has them), then evaluates.
Expected<std::vector<TensorData>> evaluate(OpId op, const std::vector<TensorData>& operands, const AttrMap& attrs = {}) {
  std::vector<TensorType> types;
  std::vector<const TensorData*> pointers;
  for (const TensorData& t : operands) {
    types.push_back(t.type);
    pointers.push_back(&t);
  }
  auto result_types = inferResultTypes(opDef(op), types, attrs);
  if (!result_types) return result_types.status();
  if (!isConstantEvaluable(op, types, *result_types)) return Status::internal("not evaluable");
  return evaluateConstantNode(op, attrs, pointers, *result_types);
}

// The single result of evaluate(); fails the test on an error.
TensorData evaluateOne(OpId op, const std::vector<TensorData>& operands, const AttrMap& attrs = {}) {
  auto results = evaluate(op, operands, attrs);
  EXPECT_TRUE(results.hasValue()) << results.status().message();
  if (!results) return {};
  EXPECT_EQ(results->size(), 1u);
  return (*results)[0];
}

using Ints = std::vector<int64_t>;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// ---- elementwise ----

TEST(ConstantEval, AddBroadcastsColumnAgainstRow) {
  TensorData r = evaluateOne(OpId::add, {i64({2, 1}, {1, 2}), i64({3}, {10, 20, 30})});
  EXPECT_EQ(r.type, (TensorType{DType::kI64, {2, 3}}));
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{11, 21, 31, 12, 22, 32}));
}

TEST(ConstantEval, ArithmeticWithScalarOperand) {
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::sub, {f32({3}, {1, 2, 3}), f32({}, {0.5f})})),
            (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::mul, {f32({}, {2}), f32({2}, {3, -4})})), (std::vector<float>{6, -8}));
  EXPECT_EQ(elementsOf<double>(evaluateOne(OpId::div, {f64({2}, {1, -3}), f64({1}, {2})})),
            (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::pow, {f32({2}, {2, 9}), f32({2}, {3, 0.5f})})),
            (std::vector<float>{8, 3}));
}

TEST(ConstantEval, IntegerDivisionTruncatesTowardZero) {
  TensorData r = evaluateOne(OpId::div, {i32({4}, {7, -7, 7, -7}), i32({4}, {2, 2, -2, -2})});
  EXPECT_EQ(elementsOf<int32_t>(r), (std::vector<int32_t>{3, -3, -3, 3}));
}

TEST(ConstantEval, IntegerDivisionByZeroIsAnError) {
  auto r = evaluate(OpId::div, {i64({2}, {1, 2}), i64({2}, {1, 0})});
  ASSERT_FALSE(r.hasValue());
  EXPECT_EQ(r.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(r.status().message().find("division by zero"), std::string::npos) << r.status().message();
}

TEST(ConstantEval, IntegerArithmeticWrapsAround) {
  const int32_t max = std::numeric_limits<int32_t>::max(), min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::add, {i32({1}, {max}), i32({1}, {1})})), (std::vector<int32_t>{min}));
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::div, {i32({1}, {min}), i32({1}, {-1})})), (std::vector<int32_t>{min}));
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::neg, {i64({1}, {kMin})})), (Ints{kMin}));
}

TEST(ConstantEval, IntegerPowIsExact) {
  TensorData r = evaluateOne(OpId::pow, {i64({5}, {2, 3, -2, 2, -1}), i64({5}, {10, 0, 3, -1, -3})});
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{1024, 1, -8, 0, -1}));
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::pow, {i64({1}, {3}), i64({1}, {39})})), (Ints{4052555153018976267}));
}

TEST(ConstantEval, ComparisonsGiveBool) {
  TensorData r = evaluateOne(OpId::less, {f32({2, 1}, {1, 5}), f32({3}, {0, 1, 6})});
  EXPECT_EQ(r.type, (TensorType{DType::kBool, {2, 3}}));
  EXPECT_EQ(elementsOf<uint8_t>(r), (std::vector<uint8_t>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::equal, {i64({3}, {1, 2, 3}), i64({}, {2})})),
            (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::greater_equal, {i32({3}, {1, 2, 3}), i32({}, {2})})),
            (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::equal, {boolean({2}, {0, 1}), boolean({2}, {0, 0})})),
            (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::less_equal, {i64({2}, {1, 2}), i64({2}, {1, 1})})),
            (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::greater, {f64({2}, {1, 2}), f64({2}, {1, 1})})),
            (std::vector<uint8_t>{0, 1}));
}

TEST(ConstantEval, UnaryOps) {
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::neg, {i64({2}, {3, -4})})), (Ints{-3, 4}));
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::relu, {i32({3}, {-3, 0, 4})})), (std::vector<int32_t>{0, 0, 4}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::relu, {f32({2}, {-1.5f, 2.5f})})), (std::vector<float>{0, 2.5f}));
  EXPECT_EQ(elementsOf<double>(evaluateOne(OpId::sqrt, {f64({2}, {16, 2.25})})), (std::vector<double>{4, 1.5}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::sigmoid, {f32({1}, {0})})), (std::vector<float>{0.5f}));
  EXPECT_DOUBLE_EQ(elementsOf<double>(evaluateOne(OpId::exp, {f64({1}, {1})}))[0], std::exp(1.0));
  EXPECT_DOUBLE_EQ(elementsOf<double>(evaluateOne(OpId::log, {f64({1}, {std::exp(2.0)})}))[0], 2.0);
  EXPECT_DOUBLE_EQ(elementsOf<double>(evaluateOne(OpId::tanh, {f64({1}, {0.5})}))[0], std::tanh(0.5));
  EXPECT_DOUBLE_EQ(elementsOf<double>(evaluateOne(OpId::erf, {f64({1}, {0.5})}))[0], std::erf(0.5));
  // gelu(1) = Φ(1) = 0.841344746...; the tanh form gives 0.841191990...
  EXPECT_NEAR(elementsOf<double>(evaluateOne(OpId::gelu, {f64({1}, {1})}))[0], 0.8413447460685429, 1e-12);
  EXPECT_NEAR(elementsOf<double>(evaluateOne(OpId::gelu, {f64({1}, {1})}, {{"approximate", std::string("tanh")}}))[0],
              0.8411919906082768, 1e-12);
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::clip, {f32({3}, {-5, 0.5f, 5})}, {{"min", -1.0}, {"max", 1.0}})),
            (std::vector<float>{-1, 0.5f, 1}));
}

TEST(ConstantEval, CastConvertsEveryWay) {
  const AttrMap to_i64{{"to", std::string("i64")}};
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::cast, {f32({3}, {1.9f, -1.9f, 0})}, to_i64)), (Ints{1, -1, 0}));
  EXPECT_EQ(elementsOf<uint8_t>(evaluateOne(OpId::cast, {f32({3}, {0.25f, -2, 0})}, {{"to", std::string("bool")}})),
            (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::cast, {boolean({2}, {1, 0})}, {{"to", std::string("f32")}})),
            (std::vector<float>{1, 0}));
  // i64 -> i32 keeps the low 32 bits (two's complement).
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::cast, {i64({2}, {(int64_t{1} << 32) + 5, -1})}, {{"to", std::string("i32")}})),
            (std::vector<int32_t>{5, -1}));
  EXPECT_EQ(elementsOf<double>(evaluateOne(OpId::cast, {i32({1}, {-7})}, {{"to", std::string("f64")}})),
            (std::vector<double>{-7}));
}

// As PyTorch on x86: NaN, ±inf and out-of-range floats give INT64_MIN (i64) or INT32_MIN (i32).
TEST(ConstantEval, CastOfUnrepresentableFloatToIntegerIsPyTorchs) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::cast, {f32({3}, {std::nanf(""), inf, -2.9f})}, {{"to", std::string("i32")}})),
            (std::vector<int32_t>{INT32_MIN, INT32_MIN, -2}));
  EXPECT_EQ(elementsOf<int32_t>(evaluateOne(OpId::cast, {f64({1}, {3e9})}, {{"to", std::string("i32")}})),
            (std::vector<int32_t>{INT32_MIN}));
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::cast, {f32({3}, {-inf, std::nanf(""), 3e9f})}, {{"to", std::string("i64")}})),
            (std::vector<int64_t>{INT64_MIN, INT64_MIN, 3000000000}));
}

TEST(ConstantEval, WhereBroadcastsAllThree) {
  TensorData r = evaluateOne(OpId::where, {boolean({2, 1}, {1, 0}), i64({3}, {1, 2, 3}), i64({}, {-1})});
  EXPECT_EQ(r.type, (TensorType{DType::kI64, {2, 3}}));
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{1, 2, 3, -1, -1, -1}));
}

// ---- data movement ----

TEST(ConstantEval, ReshapeFlattenSqueezeUnsqueezeKeepElements) {
  const TensorData x = i64({2, 3}, {0, 1, 2, 3, 4, 5});
  TensorData reshaped = evaluateOne(OpId::reshape, {x}, {{"shape", Ints{3, -1}}});
  EXPECT_EQ(reshaped.type, (TensorType{DType::kI64, {3, 2}}));
  EXPECT_EQ(elementsOf<int64_t>(reshaped), (Ints{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(evaluateOne(OpId::flatten, {i64({2, 1, 3}, {0, 1, 2, 3, 4, 5})}).type, (TensorType{DType::kI64, {2, 3}}));
  EXPECT_EQ(evaluateOne(OpId::squeeze, {i64({1, 6, 1}, {0, 1, 2, 3, 4, 5})}).type, (TensorType{DType::kI64, {6}}));
  TensorData unsqueezed = evaluateOne(OpId::unsqueeze, {i64({}, {7})}, {{"axes", Ints{0}}});
  EXPECT_EQ(unsqueezed.type, (TensorType{DType::kI64, {1}}));
  EXPECT_EQ(elementsOf<int64_t>(unsqueezed), (Ints{7}));
  EXPECT_EQ(elementsOf<int64_t>(evaluateOne(OpId::identity, {x})), (Ints{0, 1, 2, 3, 4, 5}));
}

TEST(ConstantEval, TransposeDefaultReversesDims) {
  TensorData r = evaluateOne(OpId::transpose, {i64({2, 3}, {0, 1, 2, 3, 4, 5})});
  EXPECT_EQ(r.type, (TensorType{DType::kI64, {3, 2}}));
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{0, 3, 1, 4, 2, 5}));
}

TEST(ConstantEval, TransposeWithPerm) {
  // x[a][b][c] = 6a + 3b + c with shape [2,2,3]; result[c][a][b] = x[a][b][c].
  TensorData r = evaluateOne(OpId::transpose, {i32({2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})},
                             {{"perm", Ints{2, 0, 1}}});
  EXPECT_EQ(r.type, (TensorType{DType::kI32, {3, 2, 2}}));
  EXPECT_EQ(elementsOf<int32_t>(r), (std::vector<int32_t>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
}

TEST(ConstantEval, ConcatAlongEachAxis) {
  const TensorData a = i64({2, 1}, {1, 2}), b = i64({2, 2}, {3, 4, 5, 6});
  TensorData last = evaluateOne(OpId::concat, {a, b}, {{"axis", int64_t{-1}}});
  EXPECT_EQ(last.type, (TensorType{DType::kI64, {2, 3}}));
  EXPECT_EQ(elementsOf<int64_t>(last), (Ints{1, 3, 4, 2, 5, 6}));
  TensorData first = evaluateOne(OpId::concat, {i64({1}, {4}), i64({2}, {-1, 7}), i64({1}, {9})}, {{"axis", int64_t{0}}});
  EXPECT_EQ(elementsOf<int64_t>(first), (Ints{4, -1, 7, 9}));
}

TEST(ConstantEval, SplitAlongAxis) {
  auto r = evaluate(OpId::split, {f32({2, 3}, {0, 1, 2, 3, 4, 5})}, {{"axis", int64_t{1}}, {"sizes", Ints{1, 2}}});
  ASSERT_TRUE(r.hasValue()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].type, (TensorType{DType::kF32, {2, 1}}));
  EXPECT_EQ(elementsOf<float>((*r)[0]), (std::vector<float>{0, 3}));
  EXPECT_EQ(elementsOf<float>((*r)[1]), (std::vector<float>{1, 2, 4, 5}));
}

TEST(ConstantEval, SliceWithNegativeStepReverses) {
  const TensorData x = i64({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // ONNX's reversal idiom: start -1, end INT64_MIN, step -1.
  TensorData reversed = evaluateOne(OpId::slice, {x}, {{"starts", Ints{-1}}, {"ends", Ints{kMin}}, {"steps", Ints{-1}}});
  EXPECT_EQ(elementsOf<int64_t>(reversed), (Ints{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  TensorData strided = evaluateOne(OpId::slice, {x}, {{"starts", Ints{8}}, {"ends", Ints{1}}, {"steps", Ints{-3}}});
  EXPECT_EQ(elementsOf<int64_t>(strided), (Ints{8, 5, 2}));
  TensorData negative_end = evaluateOne(OpId::slice, {x}, {{"starts", Ints{-2}}, {"ends", Ints{-6}}, {"steps", Ints{-2}}});
  EXPECT_EQ(elementsOf<int64_t>(negative_end), (Ints{8, 6}));
}

TEST(ConstantEval, SliceClampsOutOfRangeBounds) {
  const TensorData x = i64({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  TensorData to_end = evaluateOne(OpId::slice, {x}, {{"starts", Ints{1}}, {"ends", Ints{kMax}}, {"steps", Ints{2}}});
  EXPECT_EQ(elementsOf<int64_t>(to_end), (Ints{1, 3, 5, 7, 9}));
  TensorData from_before = evaluateOne(OpId::slice, {x}, {{"starts", Ints{-100}}, {"ends", Ints{3}}});
  EXPECT_EQ(elementsOf<int64_t>(from_before), (Ints{0, 1, 2}));
  TensorData empty = evaluateOne(OpId::slice, {x}, {{"starts", Ints{20}}, {"ends", Ints{30}}});
  EXPECT_EQ(empty.type, (TensorType{DType::kI64, {0}}));
  EXPECT_TRUE(empty.bytes.empty());
}

TEST(ConstantEval, SliceSelectedAxesOfMatrix) {
  // x[r][c] = 4r + c, shape [3,4]: rows 0 and 2, columns 3, 2, 1.
  const TensorData x = i32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  TensorData r = evaluateOne(OpId::slice, {x},
                             {{"starts", Ints{0, -1}}, {"ends", Ints{3, 0}}, {"axes", Ints{0, -1}}, {"steps", Ints{2, -1}}});
  EXPECT_EQ(r.type, (TensorType{DType::kI32, {2, 3}}));
  EXPECT_EQ(elementsOf<int32_t>(r), (std::vector<int32_t>{3, 2, 1, 11, 10, 9}));
  TensorData columns = evaluateOne(OpId::slice, {x}, {{"starts", Ints{1}}, {"ends", Ints{3}}, {"axes", Ints{1}}});
  EXPECT_EQ(elementsOf<int32_t>(columns), (std::vector<int32_t>{1, 2, 5, 6, 9, 10}));
}

TEST(ConstantEval, GatherWithNegativeIndices) {
  const TensorData data = i64({3, 2}, {1, 2, 3, 4, 5, 6});
  TensorData rows = evaluateOne(OpId::gather, {data, i64({2}, {-1, 0})});
  EXPECT_EQ(rows.type, (TensorType{DType::kI64, {2, 2}}));
  EXPECT_EQ(elementsOf<int64_t>(rows), (Ints{5, 6, 1, 2}));
  // Axis 1 with a [2,2] i32 index tensor: result [3,2,2].
  TensorData columns = evaluateOne(OpId::gather, {data, i32({2, 2}, {1, 0, 0, -1})}, {{"axis", int64_t{1}}});
  EXPECT_EQ(columns.type, (TensorType{DType::kI64, {3, 2, 2}}));
  EXPECT_EQ(elementsOf<int64_t>(columns), (Ints{2, 1, 1, 2, 4, 3, 3, 4, 6, 5, 5, 6}));
}

TEST(ConstantEval, GatherScalarIndexDropsTheAxis) {
  TensorData r = evaluateOne(OpId::gather, {i64({4}, {2, 3, 4, 5}), i64({}, {-3})});
  EXPECT_EQ(r.type, (TensorType{DType::kI64, {}}));
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{3}));
}

TEST(ConstantEval, GatherIndexOutOfRangeIsAnError) {
  auto high = evaluate(OpId::gather, {i64({3}, {1, 2, 3}), i64({1}, {3})});
  ASSERT_FALSE(high.hasValue());
  EXPECT_EQ(high.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(high.status().message().find("index 3 is out of range"), std::string::npos) << high.status().message();
  EXPECT_FALSE(evaluate(OpId::gather, {i64({3}, {1, 2, 3}), i64({1}, {-4})}).hasValue());
}

TEST(ConstantEval, ExpandBroadcastsToShape) {
  TensorData r = evaluateOne(OpId::expand, {i64({3, 1}, {1, 2, 3})}, {{"shape", Ints{2, 1, 2}}});
  EXPECT_EQ(r.type, (TensorType{DType::kI64, {2, 3, 2}}));
  EXPECT_EQ(elementsOf<int64_t>(r), (Ints{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
}

TEST(ConstantEval, TriluKeepsATriangle) {
  const TensorData x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::trilu, {x})), (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::trilu, {x}, {{"upper", int64_t{1}}, {"k", int64_t{1}}})),
            (std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::trilu, {x}, {{"upper", int64_t{0}}, {"k", int64_t{-1}}})),
            (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  // Batched and non-square: a causal mask [2,2,3], lower with k = 0.
  TensorData batched = evaluateOne(OpId::trilu, {i64({2, 2, 3}, {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2})}, {{"upper", int64_t{0}}});
  EXPECT_EQ(elementsOf<int64_t>(batched), (Ints{1, 0, 0, 1, 1, 0, 2, 0, 0, 2, 2, 0}));
}

// ---- reductions ----

TEST(ConstantEval, Reductions) {
  const TensorData x = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  TensorData rows = evaluateOne(OpId::reduce_sum, {x}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}});
  EXPECT_EQ(rows.type, (TensorType{DType::kI64, {2}}));
  EXPECT_EQ(elementsOf<int64_t>(rows), (Ints{6, 15}));
  TensorData columns = evaluateOne(OpId::reduce_max, {x}, {{"axes", Ints{-2}}});
  EXPECT_EQ(columns.type, (TensorType{DType::kI64, {1, 3}}));
  EXPECT_EQ(elementsOf<int64_t>(columns), (Ints{4, 5, 6}));
  TensorData mean = evaluateOne(OpId::reduce_mean, {f32({2, 2}, {1, 2, 3, 6})});
  EXPECT_EQ(mean.type, (TensorType{DType::kF32, {1, 1}}));
  EXPECT_EQ(elementsOf<float>(mean), (std::vector<float>{3}));
  EXPECT_EQ(elementsOf<float>(evaluateOne(OpId::reduce_max, {f32({3}, {-5, -2, -9})}, {{"keepdims", int64_t{0}}})),
            (std::vector<float>{-2}));
}

// ---- scope ----

TEST(ConstantEval, RejectsOpsAndTypesItDoesNotHandle) {
  const TensorType f32x2{DType::kF32, {2, 2}}, f16x2{DType::kF16, {2}}, i64x2{DType::kI64, {2}}, boolx2{DType::kBool, {2}};
  EXPECT_FALSE(isConstantEvaluable(OpId::matmul, std::vector{f32x2, f32x2}, std::vector{f32x2}));
  EXPECT_FALSE(isConstantEvaluable(OpId::dropout, std::vector{f32x2}, std::vector{f32x2}));
  EXPECT_FALSE(isConstantEvaluable(OpId::add, std::vector{f16x2, f16x2}, std::vector{f16x2}));
  EXPECT_FALSE(isConstantEvaluable(OpId::add, std::vector{boolx2, boolx2}, std::vector{boolx2}));
  EXPECT_FALSE(isConstantEvaluable(OpId::sqrt, std::vector{i64x2}, std::vector{i64x2}));
  EXPECT_FALSE(isConstantEvaluable(OpId::less, std::vector{boolx2, boolx2}, std::vector{boolx2}));
  EXPECT_TRUE(isConstantEvaluable(OpId::equal, std::vector{boolx2, boolx2}, std::vector{boolx2}));
  EXPECT_TRUE(isConstantEvaluable(OpId::add, std::vector{i64x2, i64x2}, std::vector{i64x2}));
  const TensorData a{f32x2, std::vector<uint8_t>(16)};
  const TensorData* operands[] = {&a, &a};
  const TensorType result[] = {f32x2};
  auto r = evaluateConstantNode(OpId::matmul, {}, operands, result);
  ASSERT_FALSE(r.hasValue());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInternal);
}

// An ONNX shape subgraph (Shape -> Gather -> Unsqueeze -> Concat) folds to the reshape target.
TEST(ConstantEval, ShapeSubgraphChain) {
  const TensorData shape = i64({4}, {2, 3, 4, 5});
  TensorData batch = evaluateOne(OpId::gather, {shape, i64({}, {0})});
  TensorData batch_1d = evaluateOne(OpId::unsqueeze, {batch}, {{"axes", Ints{0}}});
  TensorData target = evaluateOne(OpId::concat, {batch_1d, i64({1}, {-1})}, {{"axis", int64_t{0}}});
  EXPECT_EQ(target.type, (TensorType{DType::kI64, {2}}));
  EXPECT_EQ(elementsOf<int64_t>(target), (Ints{2, -1}));
}

}  // namespace
}  // namespace cleave
