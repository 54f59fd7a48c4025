// Tests of the op table's forward ops: coverage, shape rules, cost rules and sharding rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ir/op_table.h"

namespace cleave {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
TensorType i64(Shape shape) { return {DType::kI64, std::move(shape)}; }
TensorType typed(DType dtype, Shape shape) { return {dtype, std::move(shape)}; }

const OpDef& def(std::string_view name) {
  std::optional<OpId> id = lookupOp(name);
  EXPECT_TRUE(id.has_value()) << name;
  return opDef(id.value_or(OpId::identity));
}

Expected<std::vector<TensorType>> infer(std::string_view op, const std::vector<TensorType>& operands,
                                        const AttrMap& attrs = {}) {
  return inferResultTypes(def(op), operands, attrs);
}

// The result types of a node the test expects to be valid.
std::vector<TensorType> results(std::string_view op, const std::vector<TensorType>& operands, const AttrMap& attrs = {}) {
  auto inferred = infer(op, operands, attrs);
  EXPECT_TRUE(inferred.hasValue()) << op << ": " << inferred.status().message();
  return inferred ? *inferred : std::vector<TensorType>{};
}

// The single result shape of a node the test expects to be valid.
Shape shapeOf(std::string_view op, const std::vector<TensorType>& operands, const AttrMap& attrs = {}) {
  std::vector<TensorType> types = results(op, operands, attrs);
  EXPECT_EQ(types.size(), 1u) << op;
  return types.empty() ? Shape{-99} : types[0].shape;
}

// The error message of a node the test expects to be invalid (always a kBadInput error).
std::string errorOf(std::string_view op, const std::vector<TensorType>& operands, const AttrMap& attrs = {}) {
  auto inferred = infer(op, operands, attrs);
  EXPECT_FALSE(inferred.hasValue()) << op << " unexpectedly gave " << (inferred ? (*inferred)[0].str() : "");
  if (inferred) return "";
  EXPECT_EQ(inferred.status().kind(), ErrorKind::kBadInput);
  return inferred.status().message();
}

OpCost costOf(std::string_view op, const std::vector<TensorType>& operands, const AttrMap& attrs = {}) {
  std::vector<TensorType> types = results(op, operands, attrs);
  return def(op).cost(OpContext{def(op), operands, types, attrs});
}

ShardingRule ruleOf(std::string_view op, const std::vector<TensorType>& operands, const AttrMap& attrs = {}) {
  std::vector<TensorType> types = results(op, operands, attrs);
  return def(op).sharding(OpContext{def(op), operands, types, attrs});
}

// Structural invariants every sharding rule of a valid node keeps: one dim list per operand and
// result with its rank, factor indices in range, and every mapped dim the size of its factor.
void expectConsistentRule(const ShardingRule& rule, const std::vector<TensorType>& operands,
                          const std::vector<TensorType>& result_types, const std::string& what) {
  ASSERT_EQ(rule.factor_sizes.size(), rule.factor_kinds.size()) << what;
  auto check = [&](const std::vector<std::vector<int>>& dims, const std::vector<TensorType>& types, const char* side) {
    ASSERT_EQ(dims.size(), types.size()) << what << " " << side;
    for (size_t t = 0; t < types.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>(dims[t].size()), types[t].rank()) << what << " " << side << " " << t;
      for (size_t d = 0; d < dims[t].size(); ++d) {
        int f = dims[t][d];
        if (f == ShardingRule::kNoFactor) continue;
        ASSERT_GE(f, 0) << what;
        ASSERT_LT(f, rule.numFactors()) << what;
        EXPECT_EQ(rule.factor_sizes[f], types[t].shape[d]) << what << " " << side << " " << t << " dim " << d;
      }
    }
  };
  check(rule.operand_dims, operands, "operand");
  check(rule.result_dims, result_types, "result");
}

AttrMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> list) { return AttrMap(list); }
std::vector<int64_t> ints(std::initializer_list<int64_t> values) { return values; }

// ---- The table itself ----

TEST(OpTable, EveryOpHasADefinitionAndItsNameRoundTrips) {
  std::span<const OpDef> defs = allOpDefs();
  ASSERT_EQ(static_cast<int>(defs.size()), kNumOps);
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = defs[i];
    EXPECT_EQ(static_cast<int>(d.id), i);
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.summary.empty()) << d.name;
    EXPECT_NE(d.shape, nullptr) << d.name;
    EXPECT_NE(d.cost, nullptr) << d.name;
    EXPECT_NE(d.sharding, nullptr) << d.name;
    EXPECT_EQ(opName(d.id), d.name);
    ASSERT_TRUE(lookupOp(d.name).has_value()) << d.name;
    EXPECT_EQ(*lookupOp(d.name), d.id);
    EXPECT_GE(d.min_operands, 0) << d.name;
    EXPECT_TRUE(d.max_operands == -1 || d.max_operands >= d.min_operands) << d.name;
    for (const AttrSpec& spec : d.attrs)  // defaults have the attribute's kind, so getters return them
      EXPECT_EQ(attrKind(spec.default_value), spec.kind) << d.name << "." << spec.name;
  }
  EXPECT_FALSE(lookupOp("no_such_op").has_value());
  EXPECT_FALSE(lookupOp("").has_value());
}

// The build-bug checks of the table (an op defined twice or not at all, in the wrong family file,
// without a shape, cost or sharding rule): the table built from the family files passes them.
TEST(OpTable, IsConsistent) {
  Status status = opTableStatus();
  EXPECT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(checkOpDefinitions(allOpDefs()).isOk());
}

// Each op is defined by the family file whose header (ir/ops/<family>.h) lists its id.
TEST(OpTable, EachOpSitsInTheFamilyWhoseHeaderListsIt) {
  std::vector<std::pair<OpId, OpFamily>> listed;
#define CLEAVE_LIST_LA(id, name) listed.emplace_back(OpId::id, OpFamily::kLinearAlgebra);
#define CLEAVE_LIST_EW(id, name) listed.emplace_back(OpId::id, OpFamily::kElementwise);
#define CLEAVE_LIST_RE(id, name) listed.emplace_back(OpId::id, OpFamily::kReduction);
#define CLEAVE_LIST_CO(id, name) listed.emplace_back(OpId::id, OpFamily::kConvolution);
#define CLEAVE_LIST_SH(id, name) listed.emplace_back(OpId::id, OpFamily::kShape);
#define CLEAVE_LIST_LO(id, name) listed.emplace_back(OpId::id, OpFamily::kLoss);
#define CLEAVE_LIST_GR(id, name) listed.emplace_back(OpId::id, OpFamily::kGradient);
#define CLEAVE_LIST_OP(id, name) listed.emplace_back(OpId::id, OpFamily::kOptimizer);
#define CLEAVE_LIST_CM(id, name) listed.emplace_back(OpId::id, OpFamily::kCommunication);
#define CLEAVE_LIST_FU(id, name) listed.emplace_back(OpId::id, OpFamily::kFused);
  CLEAVE_LINEAR_ALGEBRA_OPS(CLEAVE_LIST_LA)
  CLEAVE_ELEMENTWISE_OPS(CLEAVE_LIST_EW)
  CLEAVE_REDUCTION_OPS(CLEAVE_LIST_RE)
  CLEAVE_CONVOLUTION_OPS(CLEAVE_LIST_CO)
  CLEAVE_SHAPE_OPS(CLEAVE_LIST_SH)
  CLEAVE_LOSS_OPS(CLEAVE_LIST_LO)
  CLEAVE_GRADIENT_OPS(CLEAVE_LIST_GR)
  CLEAVE_OPTIMIZER_OPS(CLEAVE_LIST_OP)
  CLEAVE_COMMUNICATION_OPS(CLEAVE_LIST_CM)
  CLEAVE_FUSED_OPS(CLEAVE_LIST_FU)
#undef CLEAVE_LIST_LA
#undef CLEAVE_LIST_EW
#undef CLEAVE_LIST_RE
#undef CLEAVE_LIST_CO
#undef CLEAVE_LIST_SH
#undef CLEAVE_LIST_LO
#undef CLEAVE_LIST_GR
#undef CLEAVE_LIST_OP
#undef CLEAVE_LIST_CM
#undef CLEAVE_LIST_FU
  ASSERT_EQ(static_cast<int>(listed.size()), kNumOps);
  for (int i = 0; i < kNumOps; ++i) {
    EXPECT_EQ(static_cast<int>(listed[i].first), i);  // the family lists, in order, give the ids
    EXPECT_EQ(opDef(listed[i].first).family, listed[i].second) << opName(listed[i].first);
  }
}

TEST(OpTable, CheckNamesTheOpOfEachInconsistency) {
  const std::vector<OpDef> good(allOpDefs().begin(), allOpDefs().end());
  auto messageOf = [](const std::vector<OpDef>& defs) {
    Status status = checkOpDefinitions(defs);
    EXPECT_FALSE(status.isOk());
    EXPECT_EQ(status.kind(), ErrorKind::kInternal);
    return status.message();
  };
  auto index = [](OpId id) { return static_cast<size_t>(id); };
  std::vector<OpDef> missing = good;
  missing.erase(missing.begin() + index(OpId::relu));
  EXPECT_EQ(messageOf(missing), "op table: op has no definition: relu");
  std::vector<OpDef> twice = good;
  twice.push_back(good[index(OpId::gelu)]);
  EXPECT_EQ(messageOf(twice), "op table: op defined twice: gelu");
  std::vector<OpDef> no_rule = good;
  no_rule[index(OpId::concat)].cost = nullptr;
  EXPECT_EQ(messageOf(no_rule), "op table: op lacks a shape, cost or sharding rule: concat");
  std::vector<OpDef> moved = good;
  moved[index(OpId::mse)].family = OpFamily::kReduction;
  EXPECT_EQ(messageOf(moved), "op table: op defined by another family than the one whose header lists it: mse");
  std::vector<OpDef> nameless = good;
  nameless[index(OpId::send)].name = {};
  EXPECT_EQ(messageOf(nameless), "op table: op's properties set before its family defined it: send");
}

// Gradient rules and references live in the OpDef of their op.
TEST(OpTable, GradientAndReferenceRulesAreSetWhereExpected) {
  for (std::string_view op : {"matmul", "add", "reduce_max", "conv2d", "reshape", "mse", "conv2d_grad_input", "all_to_all"})
    EXPECT_NE(def(op).gradient, nullptr) << op;
  for (std::string_view op : {"equal", "constant", "relu_grad", "sgd_update", "send"})
    EXPECT_EQ(def(op).gradient, nullptr) << op;
  for (const OpDef& d : allOpDefs())
    if (d.constant_foldable) {
      EXPECT_NE(d.reference, nullptr) << d.name;
      EXPECT_NE(d.reference_supports, nullptr) << d.name;
      EXPECT_FALSE(d.random) << d.name;
    }
  for (std::string_view op : {"add", "cast", "reduce_mean", "gather", "split", "trilu"})
    EXPECT_TRUE(def(op).constant_foldable) << op;
}

// What a gradient communicates, from the op and, for all_gather, its sum_gradient attribute.
TEST(OpTable, GradientCommunicationFollowsTheAttributes) {
  EXPECT_EQ(gradientCommunication(opDef(OpId::grad_all_reduce), {}), CommKind::kAllReduce);
  EXPECT_EQ(gradientCommunication(opDef(OpId::shard_slice), {}), CommKind::kAllGather);
  EXPECT_EQ(gradientCommunication(opDef(OpId::all_reduce), {}), std::nullopt);
  EXPECT_EQ(gradientCommunication(opDef(OpId::all_gather), {}), std::nullopt);
  EXPECT_EQ(gradientCommunication(opDef(OpId::all_gather), AttrMap{{"sum_gradient", int64_t{0}}}), std::nullopt);
  EXPECT_EQ(gradientCommunication(opDef(OpId::all_gather), AttrMap{{"sum_gradient", int64_t{1}}}),
            CommKind::kReduceScatter);
  EXPECT_EQ(gradientCommunication(opDef(OpId::matmul), {}), std::nullopt);
}

TEST(OpTable, AttributeDefaultsFollowTheOpReference) {
  auto spec = [](std::string_view op, std::string_view attr) {
    const AttrSpec* s = def(op).findAttr(attr);
    EXPECT_NE(s, nullptr) << op << "." << attr;
    static const AttrSpec kMissing{"", AttrKind::kInt};
    return s ? *s : kMissing;
  };
  EXPECT_EQ(std::get<double>(spec("clip", "min").default_value), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<double>(spec("clip", "max").default_value), std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<double>(spec("gemm", "alpha").default_value), 1.0);
  EXPECT_EQ(std::get<std::string>(spec("gelu", "approximate").default_value), "none");
  EXPECT_EQ(std::get<double>(spec("dropout", "ratio").default_value), 0.5);
  EXPECT_EQ(std::get<std::vector<int64_t>>(spec("conv2d", "pads").default_value), ints({0, 0, 0, 0}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(spec("conv2d", "dilations").default_value), ints({1, 1}));
  EXPECT_TRUE(std::get<std::vector<int64_t>>(spec("max_pool2d", "strides").default_value).empty());
  EXPECT_TRUE(spec("max_pool2d", "kernel").required);
  EXPECT_EQ(std::get<double>(spec("layer_norm", "epsilon").default_value), 1e-5);
  EXPECT_EQ(std::get<int64_t>(spec("softmax", "axis").default_value), -1);
  EXPECT_EQ(std::get<int64_t>(spec("reduce_sum", "keepdims").default_value), 1);
  EXPECT_EQ(std::get<int64_t>(spec("flatten", "axis").default_value), 1);
  EXPECT_EQ(std::get<int64_t>(spec("softmax_cross_entropy", "ignore_index").default_value), -100);
  EXPECT_TRUE(spec("cast", "to").required);
  EXPECT_TRUE(spec("concat", "axis").required);
  EXPECT_TRUE(spec("split", "sizes").required);
  EXPECT_TRUE(spec("constant", "value").required);
  EXPECT_EQ(def("concat").max_operands, -1);
  EXPECT_EQ(def("constant").max_operands, 0);
  EXPECT_EQ(def("gemm").max_operands, 3);
  EXPECT_EQ(def("conv2d").min_operands, 2);
}

// ---- Elementwise ----

TEST(ElementwiseShape, BinaryOpsBroadcastAndComparisonsGiveBool) {
  EXPECT_EQ(shapeOf("add", {f32({2, 1, 4}), f32({3, 1})}), Shape({2, 3, 4}));
  EXPECT_EQ(shapeOf("mul", {f32({}), f32({5})}), Shape({5}));
  EXPECT_EQ(shapeOf("pow", {f32({0, 3}), f32({1, 3})}), Shape({0, 3}));
  auto less = results("less", {typed(DType::kI32, {4}), typed(DType::kI32, {2, 1})});
  ASSERT_EQ(less.size(), 1u);
  EXPECT_EQ(less[0], typed(DType::kBool, {2, 4}));
  EXPECT_EQ(results("equal", {typed(DType::kBool, {3}), typed(DType::kBool, {3})})[0].dtype, DType::kBool);
  EXPECT_EQ(results("sub", {typed(DType::kF16, {3}), typed(DType::kF16, {3})})[0].dtype, DType::kF16);
}

TEST(ElementwiseShape, BinaryOpErrorsNameTheOperand) {
  EXPECT_EQ(errorOf("add", {f32({2, 4}), f32({3})}),
            "add: operand 1 has shape [3], its dim -1 (3) does not broadcast with operand 0's dim -1 (4)");
  EXPECT_EQ(errorOf("div", {f32({2}), typed(DType::kF16, {2})}),
            "div: operand 1 has dtype f16, needs operand 0's dtype f32");
  EXPECT_NE(errorOf("add", {typed(DType::kBool, {2}), typed(DType::kBool, {2})}).find("operand 0 has dtype bool"),
            std::string::npos);
  EXPECT_NE(errorOf("less", {typed(DType::kBool, {2}), typed(DType::kBool, {2})}).find("operand 0"), std::string::npos);
  EXPECT_NE(errorOf("add", {f32({2})}).find("takes 2 operand(s), got 1"), std::string::npos);
}

TEST(ElementwiseShape, UnaryOps) {
  EXPECT_EQ(results("exp", {f32({2, 3})})[0], f32({2, 3}));
  EXPECT_EQ(results("relu", {typed(DType::kI32, {4})})[0], typed(DType::kI32, {4}));
  EXPECT_EQ(results("neg", {i64({})})[0], i64({}));
  EXPECT_EQ(errorOf("sqrt", {i64({4})}), "sqrt: operand 0 has dtype i64, needs a float dtype (f32, f16, bf16, f64)");
  EXPECT_NE(errorOf("relu", {typed(DType::kBool, {4})}).find("operand 0 has dtype bool"), std::string::npos);
  EXPECT_EQ(shapeOf("gelu", {f32({3})}, attrs({{"approximate", std::string("tanh")}})), Shape({3}));
  EXPECT_EQ(errorOf("gelu", {f32({3})}, attrs({{"approximate", std::string("fast")}})),
            "gelu: attribute 'approximate' is \"fast\", must be \"none\" or \"tanh\"");
  EXPECT_NE(errorOf("gelu", {f32({3})}, attrs({{"approximate", int64_t{1}}})).find("must be string"), std::string::npos);
}

TEST(ElementwiseShape, ClipCastWhereDropoutIdentity) {
  EXPECT_EQ(shapeOf("clip", {f32({2})}, attrs({{"min", 0.0}, {"max", 6.0}})), Shape({2}));
  EXPECT_EQ(shapeOf("clip", {typed(DType::kI8, {2})}), Shape({2}));
  EXPECT_NE(errorOf("clip", {f32({2})}, attrs({{"min", 1.0}, {"max", 0.0}})).find("attribute 'min'"), std::string::npos);
  EXPECT_NE(errorOf("clip", {f32({2})}, attrs({{"max", std::nan("")}})).find("'max' is NaN"), std::string::npos);

  EXPECT_EQ(results("cast", {f32({2, 3})}, attrs({{"to", std::string("f16")}}))[0], typed(DType::kF16, {2, 3}));
  EXPECT_EQ(results("cast", {typed(DType::kBool, {})}, attrs({{"to", std::string("i64")}}))[0], i64({}));
  EXPECT_NE(errorOf("cast", {f32({2})}, attrs({{"to", std::string("float32")}})).find("attribute 'to' is \"float32\""),
            std::string::npos);
  EXPECT_NE(errorOf("cast", {f32({2})}).find("needs attribute 'to'"), std::string::npos);

  EXPECT_EQ(results("where", {typed(DType::kBool, {2, 1, 1}), i64({3, 1}), i64({4})})[0], i64({2, 3, 4}));
  EXPECT_EQ(errorOf("where", {f32({2}), f32({2}), f32({2})}),
            "where: operand 0 has dtype f32, needs bool (it is the condition)");
  EXPECT_EQ(errorOf("where", {typed(DType::kBool, {2}), f32({2}), i64({2})}),
            "where: operand 2 has dtype i64, needs operand 1's dtype f32");
  EXPECT_EQ(errorOf("where", {typed(DType::kBool, {2}), f32({3}), f32({3})}),
            "where: operand 1 has shape [3], its dim -1 (3) does not broadcast with operand 0's dim -1 (2)");
  EXPECT_EQ(errorOf("where", {typed(DType::kBool, {1}), f32({3}), f32({2})}),
            "where: operand 2 has shape [2], its dim -1 (2) does not broadcast with the broadcast of operands "
            "0,1's dim -1 (3)");

  EXPECT_EQ(shapeOf("dropout", {f32({8})}, attrs({{"ratio", 0.0}})), Shape({8}));
  EXPECT_NE(errorOf("dropout", {f32({8})}, attrs({{"ratio", 1.0}})).find("attribute 'ratio'"), std::string::npos);
  EXPECT_NE(errorOf("dropout", {i64({8})}).find("operand 0"), std::string::npos);
  EXPECT_EQ(results("identity", {typed(DType::kU8, {7})})[0], typed(DType::kU8, {7}));
}

// ---- Linear algebra ----

TEST(LinearAlgebraShape, MatmulBatchesBroadcastAndTransposes) {
  EXPECT_EQ(shapeOf("matmul", {f32({3, 4}), f32({4, 5})}), Shape({3, 5}));
  EXPECT_EQ(shapeOf("matmul", {f32({2, 3, 4}), f32({4, 5})}), Shape({2, 3, 5}));
  EXPECT_EQ(shapeOf("matmul", {f32({2, 1, 3, 4}), f32({5, 4, 6})}), Shape({2, 5, 3, 6}));
  EXPECT_EQ(shapeOf("matmul", {f32({4, 3}), f32({5, 4})}, attrs({{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}})),
            Shape({3, 5}));
  EXPECT_EQ(shapeOf("matmul", {f32({7, 2, 4, 3}), f32({7, 1, 4, 6})}, attrs({{"transpose_a", int64_t{1}}})),
            Shape({7, 2, 3, 6}));
}

TEST(LinearAlgebraShape, MatmulErrorsNameTheOperand) {
  EXPECT_EQ(errorOf("matmul", {f32({2, 4}), f32({3, 5})}),
            "matmul: operand 1 has shape [3,5], its dim -2 (3) must equal operand 0's dim -1 (4)");
  EXPECT_EQ(errorOf("matmul", {f32({4, 2}), f32({3, 5})}, attrs({{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}})),
            "matmul: operand 1 has shape [3,5], its dim -1 (5) must equal operand 0's dim -2 (4)");
  EXPECT_EQ(errorOf("matmul", {f32({4}), f32({4, 5})}), "matmul: operand 0 has shape [4], needs rank >= 2");
  EXPECT_EQ(errorOf("matmul", {f32({2, 3, 4}), f32({5, 4, 6})}),
            "matmul: operand 1 has shape [5,4,6], its batch dims [5] do not broadcast with operand 0's batch dims [2]");
  EXPECT_EQ(errorOf("matmul", {f32({2, 2}), f32({2, 2})}, attrs({{"transpose_b", int64_t{2}}})),
            "matmul: attribute 'transpose_b' is 2, must be 0 or 1");
  EXPECT_NE(errorOf("matmul", {f32({2, 2}), typed(DType::kF64, {2, 2})}).find("operand 1 has dtype f64"), std::string::npos);
}

TEST(LinearAlgebraShape, Gemm) {
  EXPECT_EQ(shapeOf("gemm", {f32({3, 4}), f32({4, 5})}), Shape({3, 5}));
  for (const Shape& c : {Shape{3, 5}, Shape{5}, Shape{1, 5}, Shape{3, 1}, Shape{}})
    EXPECT_EQ(shapeOf("gemm", {f32({3, 4}), f32({4, 5}), f32(c)}), Shape({3, 5})) << shapeStr(c);
  EXPECT_EQ(shapeOf("gemm", {f32({4, 3}), f32({5, 4}), f32({5})},
                    attrs({{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}, {"alpha", 0.5}})),
            Shape({3, 5}));
  EXPECT_EQ(errorOf("gemm", {f32({3, 4}), f32({4, 5}), f32({2, 5})}),
            "gemm: operand 2 has shape [2,5], which does not broadcast to the result [m,n] = [3,5]");
  EXPECT_NE(errorOf("gemm", {f32({3, 4}), f32({4, 5}), f32({1, 3, 5})}).find("operand 2"), std::string::npos);
  EXPECT_EQ(errorOf("gemm", {f32({2, 3, 4}), f32({4, 5})}), "gemm: operand 0 has shape [2,3,4], needs rank 2");
}

// ---- Reductions and normalisation ----

TEST(ReductionShape, ReduceAxesAndKeepdims) {
  AttrMap axis1 = attrs({{"axes", ints({1})}, {"keepdims", int64_t{0}}});
  EXPECT_EQ(shapeOf("reduce_sum", {f32({2, 3, 4})}, axis1), Shape({2, 4}));
  EXPECT_EQ(shapeOf("reduce_mean", {f32({2, 3, 4})}, attrs({{"axes", ints({-1, 0})}})), Shape({1, 3, 1}));
  EXPECT_EQ(shapeOf("reduce_max", {f32({2, 3, 4})}), Shape({1, 1, 1}));
  EXPECT_EQ(shapeOf("reduce_max", {f32({2, 3, 4})}, attrs({{"keepdims", int64_t{0}}})), Shape({}));
  EXPECT_EQ(shapeOf("reduce_sum", {i64({0, 3})}, attrs({{"axes", ints({0})}})), Shape({1, 3}));
  EXPECT_EQ(errorOf("reduce_sum", {f32({2, 3})}, attrs({{"axes", ints({2})}})),
            "reduce_sum: attribute 'axes' has 2, out of range for operand 0 of rank 2");
  EXPECT_EQ(errorOf("reduce_sum", {f32({2, 3})}, attrs({{"axes", ints({1, -1})}})),
            "reduce_sum: attribute 'axes' names axis -1 twice");
  EXPECT_EQ(errorOf("reduce_max", {f32({0, 3})}, attrs({{"axes", ints({0})}})),
            "reduce_max: operand 0 has shape [0,3], its dim 0 is empty, which has no max");
  EXPECT_NE(errorOf("reduce_sum", {typed(DType::kBool, {3})}).find("operand 0 has dtype bool"), std::string::npos);
}

TEST(ReductionShape, SoftmaxLayerNormBatchNorm) {
  EXPECT_EQ(shapeOf("softmax", {f32({2, 5})}), Shape({2, 5}));
  EXPECT_EQ(shapeOf("log_softmax", {f32({2, 5})}, attrs({{"axis", int64_t{0}}})), Shape({2, 5}));
  EXPECT_EQ(errorOf("softmax", {f32({2, 5})}, attrs({{"axis", int64_t{2}}})),
            "softmax: attribute 'axis' is 2, out of range for operand 0 of rank 2");
  EXPECT_NE(errorOf("softmax", {i64({2})}).find("operand 0 has dtype i64"), std::string::npos);

  EXPECT_EQ(shapeOf("layer_norm", {f32({2, 7, 16}), f32({16}), f32({16})}), Shape({2, 7, 16}));
  EXPECT_EQ(shapeOf("layer_norm", {f32({2, 7, 16}), f32({7, 16})}, attrs({{"axis", int64_t{1}}})), Shape({2, 7, 16}));
  EXPECT_EQ(errorOf("layer_norm", {f32({2, 7, 16}), f32({7, 16})}),
            "layer_norm: operand 1 has shape [7,16], needs [16] (operand 0's dims from axis 2)");
  EXPECT_NE(errorOf("layer_norm", {f32({2, 16}), f32({16}), f32({15})}).find("operand 2 has shape [15]"),
            std::string::npos);
  EXPECT_NE(errorOf("layer_norm", {f32({2, 16}), f32({16})}, attrs({{"epsilon", -1.0}})).find("attribute 'epsilon'"),
            std::string::npos);

  EXPECT_EQ(shapeOf("batch_norm", {f32({8, 3, 4, 4}), f32({3}), f32({3}), f32({3}), f32({3})}), Shape({8, 3, 4, 4}));
  EXPECT_EQ(errorOf("batch_norm", {f32({8, 3, 4, 4}), f32({3}), f32({3}), f32({4}), f32({3})}),
            "batch_norm: operand 3 has shape [4], needs [3] (operand 0's channel dim 1)");
  EXPECT_NE(errorOf("batch_norm", {f32({8}), f32({3}), f32({3}), f32({3}), f32({3})}).find("operand 0"),
            std::string::npos);
}

// ---- Convolution and pooling ----

TEST(ConvolutionShape, Conv2dStridesPadsDilationsGroups) {
  EXPECT_EQ(shapeOf("conv2d", {f32({1, 3, 32, 32}), f32({8, 3, 3, 3})}, attrs({{"pads", ints({1, 1, 1, 1})}})),
            Shape({1, 8, 32, 32}));
  EXPECT_EQ(shapeOf("conv2d", {f32({2, 3, 32, 30}), f32({8, 3, 3, 3}), f32({8})},
                    attrs({{"strides", ints({2, 1})}, {"dilations", ints({2, 3})}})),
            Shape({2, 8, 14, 24}));  // (32-5)/2+1 = 14, (30-7)/1+1 = 24
  EXPECT_EQ(shapeOf("conv2d", {f32({1, 1, 5, 5}), f32({1, 1, 2, 2})}, attrs({{"pads", ints({0, 1, 0, 0})}})),
            Shape({1, 1, 4, 5}));  // asymmetric (top,left,bottom,right): height 5+0+0-2+1, width 5+1+0-2+1
  // Depthwise: groups = C, one input channel per filter; a channel multiplier of 2.
  EXPECT_EQ(shapeOf("conv2d", {f32({2, 3, 10, 10}), f32({6, 1, 3, 3})}, attrs({{"groups", int64_t{3}}})),
            Shape({2, 6, 8, 8}));
  EXPECT_EQ(shapeOf("conv2d", {f32({2, 4, 10, 10}), f32({6, 2, 1, 1})}, attrs({{"groups", int64_t{2}}})),
            Shape({2, 6, 10, 10}));
}

TEST(ConvolutionShape, Conv2dErrorsNameTheOperand) {
  EXPECT_EQ(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 4, 3, 3})}),
            "conv2d: operand 1 has shape [8,4,3,3], its dim 1 (4) must equal operand 0's channels (3) / groups (1)");
  EXPECT_EQ(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 1, 3, 3})}, attrs({{"groups", int64_t{2}}})),
            "conv2d: operand 0 has shape [1,3,8,8], its channels (3) are not divisible by groups (2)");
  EXPECT_NE(errorOf("conv2d", {f32({1, 4, 8, 8}), f32({3, 2, 3, 3})}, attrs({{"groups", int64_t{2}}}))
                .find("operand 1 has shape [3,2,3,3], its output channels"),
            std::string::npos);
  EXPECT_EQ(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3}), f32({3})}),
            "conv2d: operand 2 has shape [3], needs [8] (operand 1's output channels)");
  EXPECT_EQ(errorOf("conv2d", {f32({1, 3, 2, 8}), f32({8, 3, 3, 3})}),
            "conv2d: operand 0 has shape [1,3,2,8], its padded height (2) is smaller than the dilated kernel (3), "
            "so the output is empty");
  EXPECT_NE(errorOf("conv2d", {f32({1, 3, 8}), f32({8, 3, 3, 3})}).find("operand 0 has shape [1,3,8], needs rank 4"),
            std::string::npos);
  EXPECT_NE(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})}, attrs({{"strides", ints({0, 1})}}))
                .find("attribute 'strides'"),
            std::string::npos);
  EXPECT_NE(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})}, attrs({{"pads", ints({1, 1, 1})}}))
                .find("attribute 'pads' is [1,1,1], needs 4 values"),
            std::string::npos);
  EXPECT_NE(errorOf("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})}, attrs({{"groups", int64_t{0}}}))
                .find("attribute 'groups'"),
            std::string::npos);
  // Huge pads and dilations must not overflow.
  EXPECT_FALSE(infer("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})},
                     attrs({{"dilations", ints({kInt64Max, kInt64Max})}})));
  EXPECT_FALSE(infer("conv2d", {f32({1, 3, 8, 8}), f32({8, 3, 3, 3})},
                     attrs({{"pads", ints({kInt64Max, kInt64Max, kInt64Max, kInt64Max})}})));
}

TEST(ConvolutionShape, PoolsWithCeilMode) {
  AttrMap k3 = attrs({{"kernel", ints({3, 3})}});
  EXPECT_EQ(shapeOf("max_pool2d", {f32({1, 2, 10, 10})}, k3), Shape({1, 2, 3, 3}));  // strides default to kernel
  EXPECT_EQ(shapeOf("max_pool2d", {f32({1, 2, 10, 10})}, attrs({{"kernel", ints({3, 3})}, {"ceil_mode", int64_t{1}}})),
            Shape({1, 2, 4, 4}));
  // Ceil mode drops a last window that would start in the end padding (PyTorch gives 2, not 3).
  EXPECT_EQ(shapeOf("avg_pool2d", {f32({1, 1, 5, 5})},
                    attrs({{"kernel", ints({3, 3})}, {"strides", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})},
                           {"ceil_mode", int64_t{1}}})),
            Shape({1, 1, 2, 2}));
  EXPECT_EQ(shapeOf("max_pool2d", {f32({1, 1, 6, 6})},
                    attrs({{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})},
                           {"ceil_mode", int64_t{1}}})),
            Shape({1, 1, 4, 4}));
  EXPECT_EQ(shapeOf("avg_pool2d", {f32({4, 8, 7, 9})},
                    attrs({{"kernel", ints({2, 3})}, {"strides", ints({1, 2})}, {"count_include_pad", int64_t{1}}})),
            Shape({4, 8, 6, 4}));
  EXPECT_EQ(shapeOf("global_avg_pool", {f32({4, 8, 7, 9})}), Shape({4, 8, 1, 1}));

  EXPECT_NE(errorOf("max_pool2d", {f32({1, 2, 10, 10})}).find("needs attribute 'kernel'"), std::string::npos);
  EXPECT_EQ(errorOf("max_pool2d", {f32({1, 2, 10, 10})}, attrs({{"kernel", ints({3})}})),
            "max_pool2d: attribute 'kernel' is [3], needs 2 values");
  EXPECT_NE(errorOf("max_pool2d", {f32({1, 2, 10, 10})}, attrs({{"kernel", ints({3, 3})}, {"pads", ints({2, 0, 0, 0})}}))
                .find("attribute 'pads' is [2,0,0,0], each pad must be at most half its kernel dim"),
            std::string::npos);
  EXPECT_NE(errorOf("avg_pool2d", {f32({1, 2, 2, 2})}, k3).find("operand 0 has shape [1,2,2,2], its padded height"),
            std::string::npos);
  EXPECT_NE(errorOf("avg_pool2d", {f32({1, 2, 8, 8})}, attrs({{"kernel", ints({3, 3})}, {"strides", ints({1})}}))
                .find("attribute 'strides'"),
            std::string::npos);
  EXPECT_NE(errorOf("global_avg_pool", {f32({4, 8, 7})}).find("operand 0"), std::string::npos);
}

// ---- Shape ops ----

TEST(ShapeOpsShape, ReshapeAndFlatten) {
  EXPECT_EQ(shapeOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({0, -1})}})), Shape({2, 12}));
  EXPECT_EQ(shapeOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({-1, 6})}})), Shape({4, 6}));
  EXPECT_EQ(shapeOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({4, 0, 2})}})), Shape({4, 3, 2}));
  EXPECT_EQ(shapeOf("reshape", {f32({1})}, attrs({{"shape", ints({})}})), Shape({}));
  EXPECT_EQ(shapeOf("reshape", {f32({0, 3})}, attrs({{"shape", ints({0, 5})}})), Shape({0, 5}));
  EXPECT_EQ(errorOf("reshape", {f32({0, 3})}, attrs({{"shape", ints({3, 0})}})),  // 0 copies the 3
            "reshape: operand 0 has shape [0,3], its 0 elements cannot be reshaped to [3,0]");
  EXPECT_EQ(errorOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({-1, -1})}})),
            "reshape: attribute 'shape' is [-1,-1], it has more than one -1 (at 0 and 1)");
  EXPECT_EQ(errorOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({5, -1})}})),
            "reshape: operand 0 has shape [2,3,4], its 24 elements cannot be reshaped to [5,-1]");
  EXPECT_NE(errorOf("reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({5, 5})}})).find("operand 0 has shape [2,3,4]"),
            std::string::npos);
  EXPECT_NE(errorOf("reshape", {f32({6})}, attrs({{"shape", ints({2, 0})}})).find("its 0 at index 1"), std::string::npos);
  EXPECT_NE(errorOf("reshape", {f32({6})}, attrs({{"shape", ints({-2, -3})}})).find("dims must be >= -1"),
            std::string::npos);
  EXPECT_NE(errorOf("reshape", {f32({0, 4})}, attrs({{"shape", ints({0, -1})}})).find("ambiguous"), std::string::npos);
  EXPECT_NE(errorOf("reshape", {f32({6})}, attrs({{"shape", ints({kInt64Max, kInt64Max})}})).find("attribute 'shape'"),
            std::string::npos);

  EXPECT_EQ(shapeOf("flatten", {f32({2, 3, 4})}), Shape({2, 12}));
  EXPECT_EQ(shapeOf("flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{0}}})), Shape({1, 24}));
  EXPECT_EQ(shapeOf("flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{3}}})), Shape({24, 1}));
  EXPECT_EQ(shapeOf("flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{-1}}})), Shape({6, 4}));
  EXPECT_NE(errorOf("flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{4}}})).find("attribute 'axis' is 4"),
            std::string::npos);
}

TEST(ShapeOpsShape, TransposeConcatSplit) {
  EXPECT_EQ(shapeOf("transpose", {f32({2, 3, 4})}), Shape({4, 3, 2}));
  EXPECT_EQ(shapeOf("transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({0, 2, 1})}})), Shape({2, 4, 3}));
  EXPECT_EQ(shapeOf("transpose", {f32({})}), Shape({}));
  EXPECT_NE(errorOf("transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({0, 0, 1})}})).find("attribute 'perm'"),
            std::string::npos);
  EXPECT_NE(errorOf("transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({1, 0})}})).find("not a permutation"),
            std::string::npos);

  AttrMap axis1 = attrs({{"axis", int64_t{1}}});
  EXPECT_EQ(shapeOf("concat", {f32({2, 3}), f32({2, 5}), f32({2, 0})}, axis1), Shape({2, 8}));
  EXPECT_EQ(shapeOf("concat", {f32({2, 3})}, attrs({{"axis", int64_t{-1}}})), Shape({2, 3}));
  EXPECT_EQ(errorOf("concat", {f32({2, 3}), f32({2, 5}), f32({3, 1})}, axis1),
            "concat: operand 2 has shape [3,1], its dim 0 (3) must equal operand 0's (2); only the axis 1 may differ");
  EXPECT_NE(errorOf("concat", {f32({2, 3}), i64({2, 3})}, axis1).find("operand 1 has dtype i64"), std::string::npos);
  EXPECT_NE(errorOf("concat", {f32({2, 3}), f32({2, 3, 1})}, axis1).find("operand 1"), std::string::npos);
  EXPECT_NE(errorOf("concat", {}, axis1).find("at least 1"), std::string::npos);

  auto pieces = results("split", {f32({4, 6})}, attrs({{"axis", int64_t{1}}, {"sizes", ints({1, 0, 5})}}));
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], f32({4, 1}));
  EXPECT_EQ(pieces[1], f32({4, 0}));
  EXPECT_EQ(pieces[2], f32({4, 5}));
  EXPECT_EQ(errorOf("split", {f32({4, 6})}, attrs({{"axis", int64_t{1}}, {"sizes", ints({2, 2})}})),
            "split: attribute 'sizes' is [2,2], which sums to 4, not operand 0's dim 1 (6)");
  EXPECT_NE(errorOf("split", {f32({4, 6})}, attrs({{"axis", int64_t{1}}, {"sizes", ints({kInt64Max, kInt64Max})}}))
                .find("attribute 'sizes'"),
            std::string::npos);
  EXPECT_NE(errorOf("split", {f32({4, 6})}, attrs({{"axis", int64_t{1}}, {"sizes", ints({})}})).find("empty"),
            std::string::npos);
}

TEST(ShapeOpsShape, SliceFollowsOnnx) {
  auto slice = [](Shape in, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes = {},
                  std::vector<int64_t> steps = {}) {
    AttrMap a = attrs({{"starts", starts}, {"ends", ends}});
    if (!axes.empty()) a["axes"] = axes;
    if (!steps.empty()) a["steps"] = steps;
    return shapeOf("slice", {f32(std::move(in))}, a);
  };
  EXPECT_EQ(slice({10}, {2}, {5}), Shape({3}));
  EXPECT_EQ(slice({10}, {-3}, {kInt64Max}), Shape({3}));
  EXPECT_EQ(slice({10}, {-100}, {100}), Shape({10}));               // clamped
  EXPECT_EQ(slice({10}, {-1}, {kInt64Min}, {}, {-1}), Shape({10}));  // full reverse
  EXPECT_EQ(slice({10}, {8}, {2}, {}, {-2}), Shape({3}));            // 8, 6, 4
  EXPECT_EQ(slice({10}, {0}, {10}, {}, {3}), Shape({4}));            // 0, 3, 6, 9
  EXPECT_EQ(slice({10}, {5}, {2}), Shape({0}));                      // empty
  EXPECT_EQ(slice({10}, {9}, {-20}, {}, {kInt64Min}), Shape({1}));
  EXPECT_EQ(slice({0}, {0}, {5}, {}, {-1}), Shape({0}));
  EXPECT_EQ(slice({4, 5, 6}, {1, -4}, {3, -1}, {0, -1}), Shape({2, 5, 3}));
  EXPECT_EQ(slice({4, 5, 6}, {}, {}), Shape({4, 5, 6}));
  EXPECT_NE(errorOf("slice", {f32({10})}, attrs({{"starts", ints({0})}, {"ends", ints({5})}, {"steps", ints({0})}}))
                .find("attribute 'steps'"),
            std::string::npos);
  EXPECT_NE(errorOf("slice", {f32({10})}, attrs({{"starts", ints({0})}, {"ends", ints({5, 6})}})).find("attribute 'ends'"),
            std::string::npos);
  EXPECT_NE(errorOf("slice", {f32({10})}, attrs({{"starts", ints({0, 0})}, {"ends", ints({5, 6})}})).find("rank 1"),
            std::string::npos);
  EXPECT_NE(errorOf("slice", {f32({4, 5})}, attrs({{"starts", ints({0, 0})}, {"ends", ints({1, 1})}, {"axes", ints({1, -1})}}))
                .find("twice"),
            std::string::npos);
}

TEST(ShapeOpsShape, GatherExpandSqueezeUnsqueezeTriluConstant) {
  EXPECT_EQ(shapeOf("gather", {f32({100, 16}), i64({4, 8})}), Shape({4, 8, 16}));
  EXPECT_EQ(shapeOf("gather", {f32({2, 3, 4}), typed(DType::kI32, {5})}, attrs({{"axis", int64_t{1}}})), Shape({2, 5, 4}));
  EXPECT_EQ(shapeOf("gather", {f32({2, 3, 4}), i64({})}, attrs({{"axis", int64_t{-1}}})), Shape({2, 3}));
  EXPECT_EQ(errorOf("gather", {f32({100, 16}), f32({4})}), "gather: operand 1 has dtype f32, needs i64 or i32");
  EXPECT_NE(errorOf("gather", {f32({}), i64({4})}).find("operand 0 has shape [], needs rank >= 1"), std::string::npos);
  EXPECT_NE(errorOf("gather", {f32({2, 3}), i64({4})}, attrs({{"axis", int64_t{2}}})).find("attribute 'axis' is 2"),
            std::string::npos);

  EXPECT_EQ(shapeOf("expand", {f32({3, 1})}, attrs({{"shape", ints({2, 1, 4})}})), Shape({2, 3, 4}));
  EXPECT_EQ(shapeOf("expand", {f32({3, 4})}, attrs({{"shape", ints({1})}})), Shape({3, 4}));
  EXPECT_EQ(errorOf("expand", {f32({3, 2})}, attrs({{"shape", ints({3, 4})}})),
            "expand: operand 0 has shape [3,2], which does not broadcast with attribute 'shape' [3,4]");
  EXPECT_NE(errorOf("expand", {f32({3})}, attrs({{"shape", ints({-1})}})).find("attribute 'shape'"), std::string::npos);

  EXPECT_EQ(shapeOf("squeeze", {f32({1, 3, 1})}), Shape({3}));
  EXPECT_EQ(shapeOf("squeeze", {f32({1, 3, 1})}, attrs({{"axes", ints({-1})}})), Shape({1, 3}));
  EXPECT_EQ(errorOf("squeeze", {f32({1, 3, 1})}, attrs({{"axes", ints({1})}})),
            "squeeze: operand 0 has shape [1,3,1], its dim 1 has size 3, so attribute 'axes' cannot squeeze it");
  EXPECT_EQ(shapeOf("unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({0, -1})}})), Shape({1, 3, 4, 1}));
  EXPECT_EQ(shapeOf("unsqueeze", {f32({})}, attrs({{"axes", ints({0})}})), Shape({1}));
  EXPECT_EQ(errorOf("unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({3})}})),
            "unsqueeze: attribute 'axes' has 3, out of range for the result of rank 3");
  EXPECT_NE(errorOf("unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({1, -3})}})).find("twice"), std::string::npos);

  EXPECT_EQ(shapeOf("trilu", {f32({2, 4, 5})}, attrs({{"upper", int64_t{0}}, {"k", int64_t{-7}}})), Shape({2, 4, 5}));
  EXPECT_EQ(errorOf("trilu", {f32({4})}), "trilu: operand 0 has shape [4], needs rank >= 2");

  auto data = std::make_shared<TensorData>();
  data->type = f32({2, 2});
  data->bytes.resize(16);
  EXPECT_EQ(results("constant", {}, attrs({{"value", std::shared_ptr<const TensorData>(data)}}))[0], f32({2, 2}));
  auto short_data = std::make_shared<TensorData>(*data);
  short_data->bytes.resize(12);
  EXPECT_EQ(errorOf("constant", {}, attrs({{"value", std::shared_ptr<const TensorData>(short_data)}})),
            "constant: attribute 'value' is f32[2,2] with 12 bytes of data, the type needs 16");
  EXPECT_NE(errorOf("constant", {}, attrs({{"value", std::shared_ptr<const TensorData>()}})).find("holds no tensor"),
            std::string::npos);
  auto bad_shape = std::make_shared<TensorData>();
  bad_shape->type = f32({-2});
  EXPECT_NE(errorOf("constant", {}, attrs({{"value", std::shared_ptr<const TensorData>(bad_shape)}})).find("negative"),
            std::string::npos);
}

// ---- Losses ----

TEST(LossShape, SoftmaxCrossEntropyAndMse) {
  EXPECT_EQ(results("softmax_cross_entropy", {f32({8, 10}), i64({8})})[0], f32({}));
  EXPECT_EQ(results("softmax_cross_entropy", {typed(DType::kBF16, {4, 7, 10}), typed(DType::kI32, {4, 7})})[0], f32({}));
  EXPECT_EQ(results("softmax_cross_entropy", {f32({10}), i64({})})[0], f32({}));
  EXPECT_EQ(errorOf("softmax_cross_entropy", {f32({8, 10}), i64({10})}),
            "softmax_cross_entropy: operand 1 has shape [10], needs [8] (operand 0's dims before the class dim)");
  EXPECT_EQ(errorOf("softmax_cross_entropy", {f32({8, 10}), f32({8})}),
            "softmax_cross_entropy: operand 1 has dtype f32, needs i64 or i32");
  EXPECT_NE(errorOf("softmax_cross_entropy", {f32({8, 0}), i64({8})}).find("operand 0 has shape [8,0]"), std::string::npos);
  EXPECT_EQ(results("mse", {typed(DType::kF64, {4, 3}), typed(DType::kF64, {4, 3})})[0], f32({}));
  EXPECT_EQ(errorOf("mse", {f32({4, 3}), f32({4, 1})}), "mse: operand 1 has shape [4,1], needs [4,3] (operand 0's shape)");
}

// ---- Inputs that are not shapes at all ----

TEST(ShapeRules, RejectNegativeAndOverflowingDims) {
  EXPECT_EQ(errorOf("relu", {f32({2, -1})}), "relu: operand 0 has shape [2,-1], its dim 1 is negative");
  EXPECT_EQ(errorOf("add", {f32({3}), f32({-3})}), "add: operand 1 has shape [-3], its dim 0 is negative");
  EXPECT_NE(errorOf("exp", {f32({kInt64Max, 2})}).find("more bytes than fit"), std::string::npos);
  EXPECT_NE(errorOf("reshape", {f32({kInt64Max / 8, 2, 0})}, attrs({{"shape", ints({0})}})).find("operand 0"),
            std::string::npos);
  // Each operand fits, but their broadcast does not.
  int64_t big = int64_t{1} << 31;
  EXPECT_NE(errorOf("add", {f32({big, 1}), f32({1, big})}).find("result 0 would have shape"), std::string::npos);
  EXPECT_NE(errorOf("expand", {f32({big})}, attrs({{"shape", ints({big, 1})}})).find("result 0"), std::string::npos);
}

// Random operands and attributes for every op: the rules must never crash, and when a shape rule
// accepts a node its cost is finite and non-negative and its sharding rule is consistent.
TEST(ShapeRules, SurviveRandomInputs) {
  std::mt19937_64 rng(12345);
  auto pick = [&](auto values) { return values[rng() % values.size()]; };
  const std::vector<int64_t> dims = {0, 1, 1, 2, 3, 4, 5, 8, -1, kInt64Max, int64_t{1} << 40};
  const std::vector<int64_t> scalars = {0, 1, 2, -1, -2, 3, 4, kInt64Max, kInt64Min, 1 << 20};
  const std::vector<DType> dtypes = {DType::kF32, DType::kF32, DType::kI64, DType::kI32, DType::kBool, DType::kF16};
  auto randomShape = [&]() {
    Shape s(rng() % 5);
    for (auto& d : s) d = rng() % 4 ? pick(std::vector<int64_t>{1, 2, 3, 4}) : pick(dims);
    return s;
  };
  auto randomInts = [&]() {
    std::vector<int64_t> v(rng() % 5);
    for (auto& x : v) x = rng() % 3 ? pick(std::vector<int64_t>{-1, 0, 1, 2, 3}) : pick(scalars);
    return v;
  };
  int accepted = 0, total = 0;
  for (const OpDef& op : allOpDefs()) {
    for (int trial = 0; trial < 1500; ++trial) {
      int n = op.max_operands < 0 ? 1 + static_cast<int>(rng() % 3)
                                  : op.min_operands + static_cast<int>(rng() % (op.max_operands - op.min_operands + 1));
      std::vector<TensorType> operands;
      Shape base = randomShape();
      DType base_dtype = pick(dtypes);
      for (int i = 0; i < n; ++i)  // mostly related shapes, so that some nodes are valid
        operands.push_back(rng() % 2 ? TensorType{base_dtype, base} : TensorType{pick(dtypes), randomShape()});
      AttrMap attributes;
      for (const AttrSpec& spec : op.attrs) {
        if (!spec.required && rng() % 2) continue;
        switch (spec.kind) {
          case AttrKind::kInt: attributes[spec.name] = pick(scalars); break;
          case AttrKind::kFloat: attributes[spec.name] = pick(std::vector<double>{0.0, 0.5, 1.0, -1.0, 1e-5, NAN}); break;
          case AttrKind::kString: attributes[spec.name] = pick(std::vector<std::string>{"none", "tanh", "f16", ""}); break;
          case AttrKind::kInts: attributes[spec.name] = randomInts(); break;
          case AttrKind::kFloats: attributes[spec.name] = std::vector<double>{1.0}; break;
          case AttrKind::kTensor: {
            auto t = std::make_shared<TensorData>();
            t->type = TensorType{DType::kF32, randomShape()};
            if (rng() % 2 && t->type.shape.size() < 3) t->bytes.resize(64);
            attributes[spec.name] = std::shared_ptr<const TensorData>(t);
            break;
          }
        }
      }
      ++total;
      auto inferred = inferResultTypes(op, operands, attributes);
      OpContext ctx{op, operands, inferred ? std::span<const TensorType>(*inferred) : std::span<const TensorType>(),
                    attributes};
      OpCost cost = op.cost(ctx);
      ShardingRule rule = op.sharding(ctx);
      if (!inferred) {
        EXPECT_FALSE(inferred.status().message().empty());
        EXPECT_EQ(rule.numFactors(), 0) << op.name;
        continue;
      }
      ++accepted;
      EXPECT_TRUE(std::isfinite(cost.flops) && cost.flops >= 0) << op.name;
      EXPECT_TRUE(std::isfinite(cost.bytes) && cost.bytes >= 0) << op.name;
      expectConsistentRule(rule, operands, *inferred, std::string(op.name));
    }
  }
  EXPECT_GT(accepted, total / 20);  // the generator reaches the valid paths too
}

// A valid node of every forward op, mutated at random (a dim, a dtype, an attribute value): this reaches
// the deep checks of ops that random operands rarely satisfy (conv2d, pools, batch_norm).
TEST(ShapeRules, SurviveMutationsOfValidNodes) {
  auto tensor = [](TensorType type) {
    auto t = std::make_shared<TensorData>();
    t->type = type;
    t->bytes.resize(static_cast<size_t>(type.bytes()));
    return Attribute(std::shared_ptr<const TensorData>(t));
  };
  struct Seed {
    std::string op;
    std::vector<TensorType> operands;
    AttrMap attrs;
  };
  const std::vector<Seed> seeds = {
      {"matmul", {f32({2, 3, 4}), f32({4, 5})}, {}},
      {"gemm", {f32({3, 4}), f32({5, 4}), f32({5})}, attrs({{"transpose_b", int64_t{1}}})},
      {"add", {f32({2, 1, 4}), f32({3, 1})}, {}},
      {"pow", {f32({2, 3}), f32({3})}, {}},
      {"less_equal", {i64({2, 3}), i64({1})}, {}},
      {"gelu", {f32({4})}, attrs({{"approximate", std::string("tanh")}})},
      {"clip", {f32({4})}, attrs({{"min", 0.0}, {"max", 6.0}})},
      {"cast", {f32({4})}, attrs({{"to", std::string("i32")}})},
      {"where", {typed(DType::kBool, {2, 1}), f32({3}), f32({2, 3})}, {}},
      {"dropout", {f32({4})}, attrs({{"ratio", 0.1}})},
      {"reduce_mean", {f32({2, 3, 4})}, attrs({{"axes", ints({1})}, {"keepdims", int64_t{0}}})},
      {"reduce_max", {f32({2, 3, 4})}, attrs({{"axes", ints({-1, 0})}})},
      {"log_softmax", {f32({2, 3})}, attrs({{"axis", int64_t{0}}})},
      {"layer_norm", {f32({2, 3, 4}), f32({3, 4}), f32({3, 4})}, attrs({{"axis", int64_t{1}}})},
      {"batch_norm", {f32({2, 3, 4, 4}), f32({3}), f32({3}), f32({3}), f32({3})}, {}},
      {"conv2d", {f32({2, 4, 9, 9}), f32({6, 2, 3, 3}), f32({6})},
       attrs({{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 2})}, {"dilations", ints({1, 2})}, {"groups", int64_t{2}}})},
      {"max_pool2d", {f32({2, 3, 9, 9})}, attrs({{"kernel", ints({3, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"ceil_mode", int64_t{1}}})},
      {"avg_pool2d", {f32({2, 3, 9, 9})}, attrs({{"kernel", ints({3, 3})}, {"count_include_pad", int64_t{1}}})},
      {"global_avg_pool", {f32({2, 3, 5, 5})}, {}},
      {"reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({0, -1, 2})}})},
      {"flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{2}}})},
      {"transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({2, 0, 1})}})},
      {"concat", {f32({2, 3}), f32({2, 4}), f32({2, 1})}, attrs({{"axis", int64_t{1}}})},
      {"split", {f32({2, 6})}, attrs({{"axis", int64_t{-1}}, {"sizes", ints({2, 4})}})},
      {"slice", {f32({5, 6})}, attrs({{"starts", ints({-1, 1})}, {"ends", ints({0, 5})}, {"axes", ints({0, 1})}, {"steps", ints({-2, 2})}})},
      {"gather", {f32({10, 4}), i64({2, 3})}, attrs({{"axis", int64_t{0}}})},
      {"expand", {f32({3, 1})}, attrs({{"shape", ints({2, 3, 4})}})},
      {"squeeze", {f32({1, 3, 1})}, attrs({{"axes", ints({0})}})},
      {"unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({1})}})},
      {"trilu", {f32({2, 3, 3})}, attrs({{"upper", int64_t{0}}, {"k", int64_t{1}}})},
      {"constant", {}, attrs({{"value", tensor(f32({2, 3}))}})},
      {"softmax_cross_entropy", {f32({4, 5, 10}), i64({4, 5})}, {}},
      {"mse", {f32({4, 3}), f32({4, 3})}, {}},
  };
  std::mt19937_64 rng(777);
  const std::vector<int64_t> values = {-1, 0, 1, 2, 3, 4, 7, kInt64Max, kInt64Min};
  auto mutateInts = [&](std::vector<int64_t>& v) {
    switch (rng() % 3) {
      case 0: if (!v.empty()) v[rng() % v.size()] = values[rng() % values.size()]; break;
      case 1: v.push_back(values[rng() % values.size()]); break;
      default: if (!v.empty()) v.pop_back(); break;
    }
  };
  for (const Seed& seed : seeds) {
    ASSERT_TRUE(infer(seed.op, seed.operands, seed.attrs)) << seed.op;
    const OpDef& op = def(seed.op);
    int accepted = 0;
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<TensorType> operands = seed.operands;
      AttrMap attributes = seed.attrs;
      for (int m = 0, count = 1 + static_cast<int>(rng() % 2); m < count; ++m) {
        int what = static_cast<int>(rng() % 4);
        if (what < 2 && !operands.empty()) {
          TensorType& t = operands[rng() % operands.size()];
          if (what == 0) mutateInts(t.shape);
          else t.dtype = static_cast<DType>(rng() % 9);
        } else if (!attributes.empty()) {
          auto it = std::next(attributes.begin(), static_cast<long>(rng() % attributes.size()));
          Attribute& a = it->second;
          if (auto* i = std::get_if<int64_t>(&a)) *i = values[rng() % values.size()];
          else if (auto* list = std::get_if<std::vector<int64_t>>(&a)) mutateInts(*list);
          else if (auto* d = std::get_if<double>(&a)) *d = -*d;
        } else if (!operands.empty()) {
          mutateInts(operands[0].shape);
        }
      }
      auto inferred = inferResultTypes(op, operands, attributes);
      OpContext ctx{op, operands, inferred ? std::span<const TensorType>(*inferred) : std::span<const TensorType>(),
                    attributes};
      OpCost cost = op.cost(ctx);
      ShardingRule rule = op.sharding(ctx);
      if (!inferred) {
        EXPECT_EQ(inferred.status().message().rfind(seed.op + ": ", 0), 0u) << inferred.status().message();
        continue;
      }
      ++accepted;
      EXPECT_TRUE(std::isfinite(cost.flops) && cost.flops >= 0) << seed.op;
      expectConsistentRule(rule, operands, *inferred, seed.op);
    }
    EXPECT_GT(accepted, 0) << seed.op;
  }
}

// ---- Cost rules ----

TEST(CostRules, SpotChecks) {
  OpCost mm = costOf("matmul", {f32({2, 3, 4}), f32({4, 5})});
  EXPECT_EQ(mm.flops, 2.0 * 2 * 3 * 5 * 4);
  EXPECT_EQ(mm.bytes, 4.0 * (24 + 20 + 30));
  EXPECT_EQ(costOf("matmul", {f32({4, 3}), f32({5, 4})}, attrs({{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}}))
                .flops,
            2.0 * 3 * 5 * 4);
  EXPECT_EQ(costOf("gemm", {f32({3, 4}), f32({4, 5}), f32({5})}).flops, 2.0 * 3 * 5 * 4 + 2.0 * 3 * 5);

  // conv2d: out [1,4,8,8]; 2 FLOPs per multiply-add over C/g·kh·kw = 27, plus one bias add per output.
  OpCost conv = costOf("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})}, attrs({{"pads", ints({1, 1, 1, 1})}}));
  EXPECT_EQ(conv.flops, 2.0 * 256 * 27 + 256);
  EXPECT_EQ(conv.bytes, 4.0 * (192 + 108 + 4 + 256));
  OpCost depthwise = costOf("conv2d", {f32({1, 4, 8, 8}), f32({4, 1, 3, 3})}, attrs({{"groups", int64_t{4}}}));
  EXPECT_EQ(depthwise.flops, 2.0 * (4 * 6 * 6) * 9);

  OpCost add = costOf("add", {f32({2, 3}), f32({3})});
  EXPECT_EQ(add.flops, 6);
  EXPECT_EQ(add.bytes, 4.0 * (6 + 3 + 6));
  EXPECT_GT(costOf("exp", {f32({6})}).flops, costOf("add", {f32({6}), f32({6})}).flops);
  EXPECT_EQ(costOf("softmax", {f32({2, 10})}).flops, 5.0 * 20);
  EXPECT_EQ(costOf("layer_norm", {f32({2, 10}), f32({10})}).flops, 8.0 * 20);
  EXPECT_EQ(costOf("reduce_sum", {f32({2, 10})}).flops, 20);

  for (auto [op, a] : std::vector<std::pair<std::string, AttrMap>>{{"reshape", attrs({{"shape", ints({-1})}})},
                                                                   {"flatten", {}},
                                                                   {"squeeze", {}},
                                                                   {"unsqueeze", attrs({{"axes", ints({0})}})},
                                                                   {"identity", {}}}) {
    OpCost c = costOf(op, {f32({1, 4, 5})}, a);
    EXPECT_EQ(c.flops, 0) << op;
    EXPECT_EQ(c.bytes, 0) << op;
  }
  OpCost transpose = costOf("transpose", {f32({4, 5})});
  EXPECT_EQ(transpose.flops, 0);
  EXPECT_EQ(transpose.bytes, 2 * 80.0);
  EXPECT_EQ(costOf("gather", {f32({1000, 16}), i64({8})}).bytes, 64.0 + 2 * 512.0);  // only the picked rows
}

// ---- Sharding rules ----

TEST(ShardingRules, MatmulHasAReductionOverK) {
  ShardingRule rule = ruleOf("matmul", {f32({8, 16}), f32({16, 32})});
  EXPECT_EQ(rule.str(), "([i,j],[j,k])->([i,k]) {j=reduction}");
  ASSERT_EQ(rule.numFactors(), 3);
  int m = rule.result_dims[0][0], n = rule.result_dims[0][1], k = rule.operand_dims[0][1];
  EXPECT_EQ(rule.operand_dims[0][0], m);
  EXPECT_EQ(rule.operand_dims[1][0], k);
  EXPECT_EQ(rule.operand_dims[1][1], n);
  EXPECT_EQ(rule.factor_kinds[m], FactorKind::kPassThrough);
  EXPECT_EQ(rule.factor_kinds[n], FactorKind::kPassThrough);
  EXPECT_EQ(rule.factor_kinds[k], FactorKind::kReduction);
  EXPECT_EQ(rule.factor_sizes[m], 8);
  EXPECT_EQ(rule.factor_sizes[k], 16);
  EXPECT_EQ(rule.factor_sizes[n], 32);

  // Batched, broadcast and transposed: b's n dim comes first, a's size-1 batch dim maps to no factor.
  std::vector<TensorType> operands = {f32({2, 1, 3, 4}), f32({5, 6, 4})};
  AttrMap tb = attrs({{"transpose_b", int64_t{1}}});
  ShardingRule batched = ruleOf("matmul", operands, tb);
  expectConsistentRule(batched, operands, results("matmul", operands, tb), "batched matmul");
  const auto& result = batched.result_dims[0];  // [2,5,3,6]
  ASSERT_EQ(result.size(), 4u);
  EXPECT_EQ(batched.operand_dims[0], (std::vector<int>{result[0], ShardingRule::kNoFactor, result[2], batched.operand_dims[1][2]}));
  EXPECT_EQ(batched.operand_dims[1], (std::vector<int>{result[1], result[3], batched.operand_dims[1][2]}));
  EXPECT_EQ(batched.factor_kinds[batched.operand_dims[1][2]], FactorKind::kReduction);
  for (int d : result) EXPECT_EQ(batched.factor_kinds[d], FactorKind::kPassThrough);

  ShardingRule gemm = ruleOf("gemm", {f32({8, 16}), f32({16, 32}), f32({32})});
  EXPECT_EQ(gemm.str(), "([i,j],[j,k],[k])->([i,k]) {j=reduction}");
}

TEST(ShardingRules, ElementwiseBroadcasting) {
  std::vector<TensorType> operands = {f32({3, 1}), f32({2, 3, 4})};
  ShardingRule rule = ruleOf("add", operands);
  EXPECT_EQ(rule.str(), "([j,1],[i,j,k])->([i,j,k])");
  expectConsistentRule(rule, operands, results("add", operands), "add");
  for (FactorKind kind : rule.factor_kinds) EXPECT_EQ(kind, FactorKind::kPassThrough);
  EXPECT_EQ(ruleOf("relu", {f32({4, 5})}).str(), "([i,j])->([i,j])");
  EXPECT_EQ(ruleOf("where", {typed(DType::kBool, {4, 1}), f32({5}), f32({4, 5})}).str(), "([i,1],[j],[i,j])->([i,j])");
}

TEST(ShardingRules, SoftmaxLayerNormAndReductions) {
  EXPECT_EQ(ruleOf("softmax", {f32({4, 10})}).str(), "([i,j])->([i,j]) {j=need_replication}");
  EXPECT_EQ(ruleOf("log_softmax", {f32({4, 10})}, attrs({{"axis", int64_t{0}}})).str(),
            "([i,j])->([i,j]) {i=need_replication}");

  ShardingRule ln = ruleOf("layer_norm", {f32({2, 7, 16}), f32({16}), f32({16})});
  EXPECT_EQ(ln.str(), "([i,j,k],[k],[k])->([i,j,k]) {k=need_replication}");
  ShardingRule ln2 = ruleOf("layer_norm", {f32({2, 7, 16}), f32({7, 16})}, attrs({{"axis", int64_t{-2}}}));
  EXPECT_EQ(ln2.operand_dims[1], (std::vector<int>{ln2.operand_dims[0][1], ln2.operand_dims[0][2]}));
  EXPECT_EQ(ln2.factor_kinds[ln2.operand_dims[0][0]], FactorKind::kPassThrough);
  EXPECT_EQ(ln2.factor_kinds[ln2.operand_dims[0][1]], FactorKind::kNeedReplication);

  EXPECT_EQ(ruleOf("reduce_sum", {f32({2, 3, 4})}, attrs({{"axes", ints({1})}})).str(),
            "([i,j,k])->([i,1,k]) {j=reduction}");
  EXPECT_EQ(ruleOf("reduce_max", {f32({2, 3})}, attrs({{"keepdims", int64_t{0}}})).str(),
            "([i,j])->([]) {i=reduction,j=reduction}");
  EXPECT_EQ(ruleOf("batch_norm", {f32({8, 3, 4, 4}), f32({3}), f32({3}), f32({3}), f32({3})}).str(),
            "([i,j,k,l],[j],[j],[j],[j])->([i,j,k,l])");
}

TEST(ShardingRules, Conv2dAndPools) {
  std::vector<TensorType> operands = {f32({8, 3, 32, 32}), f32({16, 3, 3, 3}), f32({16})};
  AttrMap pad1 = attrs({{"pads", ints({1, 1, 1, 1})}});
  ShardingRule conv = ruleOf("conv2d", operands, pad1);
  expectConsistentRule(conv, operands, results("conv2d", operands, pad1), "conv2d");
  int n = conv.operand_dims[0][0], c = conv.operand_dims[0][1], o = conv.operand_dims[1][0];
  EXPECT_EQ(conv.result_dims[0][0], n);
  EXPECT_EQ(conv.result_dims[0][1], o);
  EXPECT_EQ(conv.operand_dims[2], std::vector<int>{o});
  EXPECT_EQ(conv.operand_dims[1][1], c);  // shared C factor: a reduction
  EXPECT_EQ(conv.factor_kinds[n], FactorKind::kPassThrough);
  EXPECT_EQ(conv.factor_kinds[o], FactorKind::kPassThrough);
  EXPECT_EQ(conv.factor_kinds[c], FactorKind::kReduction);
  for (int d : {2, 3}) {
    EXPECT_EQ(conv.factor_kinds[conv.operand_dims[0][d]], FactorKind::kNeedReplication);
    EXPECT_EQ(conv.factor_kinds[conv.operand_dims[1][d]], FactorKind::kNeedReplication);
    EXPECT_EQ(conv.factor_kinds[conv.result_dims[0][d]], FactorKind::kNeedReplication);
  }

  ShardingRule depthwise = ruleOf("conv2d", {f32({8, 4, 9, 9}), f32({4, 1, 3, 3})}, attrs({{"groups", int64_t{4}}}));
  EXPECT_NE(depthwise.operand_dims[0][1], depthwise.operand_dims[1][1]);
  EXPECT_EQ(depthwise.factor_kinds[depthwise.operand_dims[0][1]], FactorKind::kNeedReplication);
  // A grouped convolution keeps its output channels whole too (a block of them would need its own
  // groups' input channels and a smaller `groups`).
  EXPECT_EQ(depthwise.factor_kinds[depthwise.operand_dims[1][0]], FactorKind::kNeedReplication);

  EXPECT_EQ(ruleOf("max_pool2d", {f32({8, 3, 32, 32})}, attrs({{"kernel", ints({2, 2})}})).str(),
            "([i,j,k,l])->([i,j,m,n]) {k=need_replication,l=need_replication,m=need_replication,n=need_replication}");
  EXPECT_EQ(ruleOf("global_avg_pool", {f32({8, 3, 7, 7})}).str(),
            "([i,j,k,l])->([i,j,1,1]) {k=reduction,l=reduction}");
}

TEST(ShardingRules, ShapeOpsAndLosses) {
  EXPECT_EQ(ruleOf("transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({0, 2, 1})}})).str(), "([i,j,k])->([i,k,j])");
  // Heads split: the unchanged leading and trailing dims pass through, the split dims need replication.
  EXPECT_EQ(ruleOf("reshape", {f32({8, 128, 768})}, attrs({{"shape", ints({0, 0, 12, 64})}})).str(),
            "([i,j,k])->([i,j,l,m]) {k=need_replication,l=need_replication,m=need_replication}");
  ShardingRule split_last = ruleOf("reshape", {f32({6, 4})}, attrs({{"shape", ints({2, 3, 4})}}));
  EXPECT_EQ(split_last.operand_dims[0][1], split_last.result_dims[0][2]);
  EXPECT_EQ(split_last.factor_kinds[split_last.operand_dims[0][1]], FactorKind::kPassThrough);
  EXPECT_EQ(split_last.factor_kinds[split_last.operand_dims[0][0]], FactorKind::kNeedReplication);
  EXPECT_EQ(split_last.str(), "([i,l])->([j,k,l]) {i=need_replication,j=need_replication,k=need_replication}");
  EXPECT_EQ(ruleOf("flatten", {f32({8, 3, 4, 4})}).str(),
            "([i,j,k,l])->([i,m]) {j=need_replication,k=need_replication,l=need_replication,m=need_replication}");

  EXPECT_EQ(ruleOf("concat", {f32({2, 3}), f32({2, 5})}, attrs({{"axis", int64_t{1}}})).str(),
            "([i,j],[i,k])->([i,l]) {j=need_replication,k=need_replication,l=need_replication}");
  EXPECT_EQ(ruleOf("gather", {f32({1000, 16}), i64({4, 8})}).str(), "([i,j],[k,l])->([k,l,j]) {i=need_replication}");
  EXPECT_EQ(ruleOf("expand", {f32({3, 1})}, attrs({{"shape", ints({2, 3, 4})}})).str(), "([j,1])->([i,j,k])");
  EXPECT_EQ(ruleOf("squeeze", {f32({1, 3, 1})}).str(), "([1,i,1])->([i])");
  EXPECT_EQ(ruleOf("unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({0})}})).str(), "([i,j])->([1,i,j])");
  EXPECT_EQ(ruleOf("trilu", {f32({2, 4, 4})}).str(), "([i,j,k])->([i,j,k]) {j=need_replication,k=need_replication}");
  EXPECT_EQ(ruleOf("slice", {f32({4, 10})}, attrs({{"starts", ints({2})}, {"ends", ints({5})}, {"axes", ints({1})}})).str(),
            "([i,j])->([i,k]) {j=need_replication,k=need_replication}");
  ShardingRule split = ruleOf("split", {f32({4, 6})}, attrs({{"axis", int64_t{0}}, {"sizes", ints({1, 3})}}));
  EXPECT_EQ(split.str(), "([j,i])->([1,i],[k,i]) {j=need_replication,k=need_replication}");

  auto value = std::make_shared<TensorData>();
  value->type = f32({2, 3});
  value->bytes.resize(24);
  EXPECT_EQ(ruleOf("constant", {}, attrs({{"value", std::shared_ptr<const TensorData>(value)}})).str(), "()->([i,j])");

  EXPECT_EQ(ruleOf("softmax_cross_entropy", {f32({4, 7, 10}), i64({4, 7})}).str(),
            "([i,j,k],[i,j])->([]) {i=reduction,j=reduction,k=need_replication}");
  EXPECT_EQ(ruleOf("mse", {f32({4, 3}), f32({4, 3})}).str(), "([i,j],[i,j])->([]) {i=reduction,j=reduction}");
}

}  // namespace
}  // namespace cleave
