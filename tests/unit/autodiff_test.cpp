// Unit tests for training as graph transformations: every gradient rule against finite differences,
// autodiff's naming and diagnostics, loss heads, optimizer ops and the training pipeline.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "frontend/model_generators.h"
#include "ir/gradient.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/training/autodiff.h"
#include "passes/training/loss_head.h"
#include "passes/training/optimizer.h"
#include "passes/training/training_pipeline.h"
#include "runtime/train/initializers.h"
#include "tests/unit/graph_interpreter.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::TensorMap;

// ---------------------------------------------------------------------------------------------
// The gradient check: a tiny graph around one op, loss = Σ reduce_sum(result · fixed random
// weights), analytic gradients from appendBackward against central differences of the loss.

class GradientCheck {
 public:
  // A trainable f64 parameter with elements uniform in [low, high].
  ValueId param(const std::string& name, Shape shape, double low = -1.0, double high = 1.0) {
    TensorType type{DType::kF64, std::move(shape)};
    std::vector<double> elements(static_cast<size_t>(type.numel()));
    for (double& e : elements) e = low + (high - low) * uniform();
    return paramWithValues(name, type, elements);
  }
  // A trainable f64 parameter with magnitudes in [low, high] and random signs (away from kinks at 0).
  ValueId paramAwayFromZero(const std::string& name, Shape shape, double low = 0.2, double high = 1.0) {
    TensorType type{DType::kF64, std::move(shape)};
    std::vector<double> elements(static_cast<size_t>(type.numel()));
    for (double& e : elements) e = (uniform() < 0.5 ? -1 : 1) * (low + (high - low) * uniform());
    return paramWithValues(name, type, elements);
  }
  ValueId paramWithValues(const std::string& name, const TensorType& type, const std::vector<double>& elements,
                          bool trainable = true) {
    auto v = graph.addParam(name, type, Initializer{}, trainable);
    EXPECT_TRUE(v) << v.status().message();
    feeds[name] = test::makeTensor(type, elements);
    return v ? *v : kNoValue;
  }
  ValueId input(const std::string& name, const TensorType& type, const std::vector<double>& elements) {
    auto v = graph.addInput(name, type);
    EXPECT_TRUE(v) << v.status().message();
    feeds[name] = test::makeTensor(type, elements);
    return v ? *v : kNoValue;
  }
  std::vector<ValueId> node(OpId op, std::vector<ValueId> operands, AttrMap attrs = {}) {
    auto results = graph.addNode(op, std::move(operands), std::move(attrs));
    EXPECT_TRUE(results) << results.status().message();
    return results ? *results : std::vector<ValueId>{};
  }

  // Checks d loss / d p for every trainable parameter p, element by element:
  // |analytic − (loss(p+h) − loss(p−h)) / 2h| <= tolerance · max(1, |analytic|).
  void check(const std::vector<ValueId>& results, double step, double tolerance) {
    ASSERT_FALSE(results.empty());
    // 1. loss = Σ_r reduce_sum(r · w_r), in f64.
    Graph forward = graph;
    ValueId loss = kNoValue;
    for (size_t k = 0; k < results.size(); ++k) {
      TensorType type = forward.values[results[k]].type;
      std::string weight_name = "loss_weight_" + std::to_string(k);
      auto weight = forward.addParam(weight_name, type, Initializer{}, /*trainable=*/false);
      ASSERT_TRUE(weight);
      std::vector<double> weights(static_cast<size_t>(type.numel()));
      for (double& w : weights) w = 2 * uniform() - 1;
      feeds[weight_name] = test::makeTensor(type, weights);
      ValueId weighted = forward.addNode(OpId::mul, {results[k], *weight}).value()[0];
      ValueId term = forward.addNode(OpId::reduce_sum, {weighted}, {{"keepdims", int64_t{0}}}).value()[0];
      if (type.dtype != DType::kF64) term = forward.addNode(OpId::cast, {term}, {{"to", std::string("f64")}}).value()[0];
      loss = loss == kNoValue ? term : forward.addNode(OpId::add, {loss, term}).value()[0];
    }
    forward.outputs = {loss};
    const std::string loss_name = forward.values[loss].name;
    // 2. The backward graph and its analytic gradients.
    Graph backward = forward;
    Status differentiated = appendBackward(backward, loss);
    ASSERT_TRUE(differentiated) << differentiated.message();
    Status valid = verifyGraph(backward);
    ASSERT_TRUE(valid) << valid.message() << "\n" << printGraph(backward);
    auto values = test::evaluateGraph(backward, feeds);
    ASSERT_TRUE(values) << values.status().message() << "\n" << printGraph(backward);
    // 3. Central differences, one element at a time.
    for (const Param& p : graph.params) {
      if (!p.trainable) continue;
      const std::string& name = graph.values[p.value].name;
      auto grad = values->find(gradientName(name));
      ASSERT_NE(grad, values->end()) << "no gradient for '%" << name << "'\n" << printGraph(backward);
      std::vector<double> analytic = test::toDoubles(grad->second);
      std::vector<double> point = test::toDoubles(feeds[name]);
      for (size_t i = 0; i < point.size(); ++i) {
        double difference = 0;
        for (double sign : {1.0, -1.0}) {
          TensorMap shifted = feeds;
          std::vector<double> moved = point;
          moved[i] += sign * step;
          shifted[name] = test::makeTensor(graph.values[p.value].type, moved);
          auto at = test::evaluateGraph(forward, shifted);
          ASSERT_TRUE(at) << at.status().message();
          difference += sign * test::toDoubles(at->at(loss_name))[0];
        }
        double numeric = difference / (2 * step);
        EXPECT_NEAR(analytic[i], numeric, tolerance * std::max(1.0, std::fabs(analytic[i])))
            << "d loss / d " << name << "[" << i << "]";
      }
    }
  }

  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  Graph graph;
  TensorMap feeds;

 private:
  std::mt19937_64 rng_{20240611};
};

// One gradient check: the op it exercises, how to build its graph, and the check's precision.
struct GradientCase {
  std::string name;
  OpId op;
  std::function<std::vector<ValueId>(GradientCheck&)> build;
  double step = 1e-5;
  double tolerance = 1e-6;  // relative, in f64
};

std::ostream& operator<<(std::ostream& os, const GradientCase& c) { return os << c.name; }

using Ints = std::vector<int64_t>;
constexpr int64_t kOn = 1;
const TensorType kI64x4{DType::kI64, {4}};

// Every differentiable op, through its gradient rule (f64 unless a case says otherwise).
std::vector<GradientCase> gradientCases() {
  using C = GradientCheck;
  auto unary = [](const std::string& name, OpId op, double low, double high, AttrMap attrs = {}) {
    return GradientCase{name, op, [=](C& c) { return c.node(op, {c.param("x", {2, 3}, low, high)}, attrs); }};
  };
  auto binary = [](const std::string& name, OpId op, Shape a, Shape b, double b_low = -1, double b_high = 1) {
    return GradientCase{name, op, [=](C& c) {
                          return c.node(op, {c.param("a", a), c.param("b", b, b_low, b_high)});
                        }};
  };
  return {
      // Linear algebra: every transpose combination, batch dims broadcast both ways.
      {"matmul", OpId::matmul, [](C& c) { return c.node(OpId::matmul, {c.param("a", {3, 4}), c.param("b", {4, 5})}); }},
      {"matmul_transpose_a", OpId::matmul,
       [](C& c) { return c.node(OpId::matmul, {c.param("a", {4, 3}), c.param("b", {4, 5})}, {{"transpose_a", kOn}}); }},
      {"matmul_transpose_b", OpId::matmul,
       [](C& c) { return c.node(OpId::matmul, {c.param("a", {3, 4}), c.param("b", {5, 4})}, {{"transpose_b", kOn}}); }},
      {"matmul_transpose_both", OpId::matmul,
       [](C& c) {
         return c.node(OpId::matmul, {c.param("a", {4, 3}), c.param("b", {5, 4})},
                       {{"transpose_a", kOn}, {"transpose_b", kOn}});
       }},
      {"matmul_batched_matrix", OpId::matmul,
       [](C& c) { return c.node(OpId::matmul, {c.param("a", {2, 3, 4}), c.param("b", {4, 5})}); }},
      {"matmul_batch_dims_broadcast", OpId::matmul,
       [](C& c) {
         return c.node(OpId::matmul, {c.param("a", {2, 1, 3, 4}), c.param("b", {3, 2, 4})}, {{"transpose_b", kOn}});
       }},
      {"gemm", OpId::gemm,
       [](C& c) {
         return c.node(OpId::gemm, {c.param("a", {3, 4}), c.param("b", {4, 5}), c.param("c", {5})},
                       {{"alpha", 0.7}, {"beta", 1.3}});
       }},
      {"gemm_transposes_column_c", OpId::gemm,
       [](C& c) {
         return c.node(OpId::gemm, {c.param("a", {4, 3}), c.param("b", {5, 4}), c.param("c", {3, 1})},
                       {{"transpose_a", kOn}, {"transpose_b", kOn}, {"beta", 0.5}});
       }},
      {"gemm_without_c", OpId::gemm,
       [](C& c) { return c.node(OpId::gemm, {c.param("a", {3, 4}), c.param("b", {4, 2})}, {{"alpha", 2.0}}); }},
      // Broadcasting binary ops.
      binary("add_broadcast", OpId::add, {2, 3}, {3}),
      binary("sub_broadcast", OpId::sub, {2, 1}, {2, 3}),
      binary("mul_broadcast", OpId::mul, {2, 3, 1}, {1, 4}),
      binary("div_broadcast", OpId::div, {2, 3}, {2, 1}, 0.5, 1.5),
      {"pow", OpId::pow, [](C& c) { return c.node(OpId::pow, {c.param("a", {2, 3}, 0.5, 1.5), c.param("b", {3}, -1, 2)}); }},
      {"mul_same_operand_twice", OpId::mul,
       [](C& c) {
         ValueId x = c.param("x", {2, 3});
         return c.node(OpId::mul, {x, x});
       }},
      // Unary ops (inputs kept off kinks and out of domains' edges).
      unary("sqrt", OpId::sqrt, 0.5, 2.0),
      unary("exp", OpId::exp, -1, 1),
      unary("log", OpId::log, 0.5, 2.0),
      unary("neg", OpId::neg, -1, 1),
      unary("erf", OpId::erf, -1.5, 1.5),
      unary("tanh", OpId::tanh, -2, 2),
      unary("sigmoid", OpId::sigmoid, -3, 3),
      {"relu", OpId::relu, [](C& c) { return c.node(OpId::relu, {c.paramAwayFromZero("x", {3, 4})}); }},
      unary("gelu", OpId::gelu, -2, 2),
      unary("gelu_tanh", OpId::gelu, -2, 2, {{"approximate", std::string("tanh")}}),
      {"clip", OpId::clip,
       [](C& c) {
         ValueId x = c.paramWithValues("x", {DType::kF64, {2, 4}}, {-0.9, -0.3, 0.1, 0.7, -0.6, 0.2, 0.45, -0.1});
         return c.node(OpId::clip, {x}, {{"min", -0.5}, {"max", 0.4}});
       }},
      {"clip_min_only", OpId::clip,
       [](C& c) { return c.node(OpId::clip, {c.paramAwayFromZero("x", {2, 3})}, {{"min", 0.0}}); }},
      // An f32 parameter cast to f64: the loss is linear in it, so a step of 2^-10 is exact in f32.
      {"cast", OpId::cast,
       [](C& c) {
         ValueId x = c.paramWithValues("x", {DType::kF32, {4}}, {0.5, 0.625, 0.75, 0.875});
         return c.node(OpId::cast, {x}, {{"to", std::string("f64")}});
       },
       0x1.0p-10, 1e-6},
      {"where", OpId::where,
       [](C& c) {
         ValueId cond = c.input("cond", {DType::kBool, {2, 3}}, {1, 0, 1, 0, 0, 1});
         return c.node(OpId::where, {cond, c.param("a", {2, 3}), c.param("b", {3})});
       }},
      unary("identity", OpId::identity, -1, 1),
      unary("dropout_ratio_0", OpId::dropout, -1, 1, {{"ratio", 0.0}}),
      // Reductions and normalisation.
      {"reduce_sum_axis_1", OpId::reduce_sum,
       [](C& c) { return c.node(OpId::reduce_sum, {c.param("x", {2, 3, 4})}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}}); }},
      {"reduce_sum_all_keepdims", OpId::reduce_sum,
       [](C& c) { return c.node(OpId::reduce_sum, {c.param("x", {2, 3})}); }},
      {"reduce_sum_negative_axes", OpId::reduce_sum,
       [](C& c) { return c.node(OpId::reduce_sum, {c.param("x", {2, 3, 4})}, {{"axes", Ints{-1, 0}}}); }},
      {"reduce_mean_axis_0", OpId::reduce_mean,
       [](C& c) { return c.node(OpId::reduce_mean, {c.param("x", {3, 4})}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}}); }},
      {"reduce_mean_all", OpId::reduce_mean,
       [](C& c) { return c.node(OpId::reduce_mean, {c.param("x", {2, 3})}, {{"keepdims", int64_t{0}}}); }},
      {"reduce_max_axis_1", OpId::reduce_max,
       [](C& c) { return c.node(OpId::reduce_max, {c.param("x", {3, 4})}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}}); }},
      {"reduce_max_all_keepdims", OpId::reduce_max, [](C& c) { return c.node(OpId::reduce_max, {c.param("x", {2, 3})}); }},
      unary("softmax", OpId::softmax, -2, 2),
      unary("softmax_axis_0", OpId::softmax, -2, 2, {{"axis", int64_t{0}}}),
      unary("log_softmax", OpId::log_softmax, -2, 2),
      {"layer_norm", OpId::layer_norm,
       [](C& c) {
         return c.node(OpId::layer_norm, {c.param("x", {2, 3, 4}), c.param("scale", {4}), c.param("bias", {4})});
       }},
      {"layer_norm_axis_1_without_bias", OpId::layer_norm,
       [](C& c) {
         return c.node(OpId::layer_norm, {c.param("x", {2, 3, 4}), c.param("scale", {3, 4})},
                       {{"axis", int64_t{1}}, {"epsilon", 1e-3}});
       }},
      {"batch_norm", OpId::batch_norm,
       [](C& c) {
         ValueId mean = c.paramWithValues("mean", {DType::kF64, {3}}, {0.1, -0.2, 0.3}, /*trainable=*/false);
         ValueId var = c.paramWithValues("var", {DType::kF64, {3}}, {0.5, 1.5, 0.8}, /*trainable=*/false);
         return c.node(OpId::batch_norm,
                       {c.param("x", {2, 3, 2, 2}), c.param("scale", {3}), c.param("bias", {3}), mean, var});
       }},
      // Convolution and pooling.
      {"conv2d", OpId::conv2d,
       [](C& c) {
         return c.node(OpId::conv2d, {c.param("x", {2, 2, 5, 5}), c.param("w", {3, 2, 3, 3}), c.param("b", {3})},
                       {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
       }},
      {"conv2d_grouped_dilated", OpId::conv2d,
       [](C& c) {
         return c.node(OpId::conv2d, {c.param("x", {1, 4, 6, 6}), c.param("w", {4, 2, 2, 2})},
                       {{"groups", int64_t{2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{0, 1, 1, 0}}});
       }},
      {"conv2d_grad_input_as_transposed_conv", OpId::conv2d_grad_input,
       [](C& c) {
         return c.node(OpId::conv2d_grad_input, {c.param("u", {1, 3, 3, 3}), c.param("w", {3, 2, 3, 3})},
                       {{"input_shape", Ints{1, 2, 6, 6}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
       }},
      {"max_pool2d", OpId::max_pool2d,
       [](C& c) {
         return c.node(OpId::max_pool2d, {c.param("x", {1, 2, 5, 5})},
                       {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
       }},
      {"max_pool2d_ceil_mode", OpId::max_pool2d,
       [](C& c) {
         return c.node(OpId::max_pool2d, {c.param("x", {1, 1, 5, 5})}, {{"kernel", Ints{2, 2}}, {"ceil_mode", kOn}});
       }},
      {"avg_pool2d", OpId::avg_pool2d,
       [](C& c) {
         return c.node(OpId::avg_pool2d, {c.param("x", {1, 2, 5, 5})},
                       {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
       }},
      {"avg_pool2d_count_include_pad_ceil", OpId::avg_pool2d,
       [](C& c) {
         return c.node(OpId::avg_pool2d, {c.param("x", {1, 1, 5, 5})},
                       {{"kernel", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 0}}, {"count_include_pad", kOn}, {"ceil_mode", kOn}});
       }},
      {"global_avg_pool", OpId::global_avg_pool, [](C& c) { return c.node(OpId::global_avg_pool, {c.param("x", {2, 3, 2, 3})}); }},
      // Shape and data movement.
      {"reshape", OpId::reshape,
       [](C& c) { return c.node(OpId::reshape, {c.param("x", {2, 6})}, {{"shape", Ints{3, -1, 2}}}); }},
      {"flatten", OpId::flatten, [](C& c) { return c.node(OpId::flatten, {c.param("x", {2, 3, 4})}, {{"axis", int64_t{2}}}); }},
      {"squeeze", OpId::squeeze, [](C& c) { return c.node(OpId::squeeze, {c.param("x", {2, 1, 3})}, {{"axes", Ints{1}}}); }},
      {"unsqueeze", OpId::unsqueeze,
       [](C& c) { return c.node(OpId::unsqueeze, {c.param("x", {2, 3})}, {{"axes", Ints{0, 3}}}); }},
      {"transpose", OpId::transpose,
       [](C& c) { return c.node(OpId::transpose, {c.param("x", {2, 3, 4})}, {{"perm", Ints{2, 0, 1}}}); }},
      {"transpose_reversed", OpId::transpose, [](C& c) { return c.node(OpId::transpose, {c.param("x", {2, 3, 4})}); }},
      {"concat", OpId::concat,
       [](C& c) {
         ValueId fixed = c.input("fixed", {DType::kF64, {2, 2}}, {1, 2, 3, 4});
         return c.node(OpId::concat, {c.param("a", {2, 1}), fixed, c.param("b", {2, 3})}, {{"axis", int64_t{-1}}});
       }},
      {"split_with_unused_result", OpId::split,
       [](C& c) {
         auto parts = c.node(OpId::split, {c.param("x", {4, 3})}, {{"axis", int64_t{0}}, {"sizes", Ints{1, 2, 1}}});
         return std::vector<ValueId>{parts.at(0), parts.at(2)};
       }},
      {"slice", OpId::slice,
       [](C& c) {
         return c.node(OpId::slice, {c.param("x", {4, 5})},
                       {{"starts", Ints{3, 0}}, {"ends", Ints{0, 5}}, {"axes", Ints{0, 1}}, {"steps", Ints{-1, 2}}});
       }},
      {"gather_repeated_indices", OpId::gather,
       [](C& c) {
         ValueId indices = c.input("indices", {DType::kI64, {2, 3}}, {0, 3, 3, 1, 0, 3});
         return c.node(OpId::gather, {c.param("data", {3, 4}), indices}, {{"axis", int64_t{1}}});
       }},
      {"expand", OpId::expand, [](C& c) { return c.node(OpId::expand, {c.param("x", {3, 1})}, {{"shape", Ints{2, 3, 4}}}); }},
      {"trilu_upper", OpId::trilu,
       [](C& c) { return c.node(OpId::trilu, {c.param("x", {2, 3,4})}, {{"upper", kOn}, {"k", int64_t{1}}}); }},
      {"trilu_lower", OpId::trilu,
       [](C& c) { return c.node(OpId::trilu, {c.param("x", {3, 4})}, {{"upper", int64_t{0}}, {"k", int64_t{-1}}}); }},
      // Losses: their result is f32, so the differences are taken with a larger step and tolerance.
      {"softmax_cross_entropy_ignore_index", OpId::softmax_cross_entropy,
       [](C& c) {
         ValueId labels = c.input("labels", kI64x4, {2, -100, 0, 1});
         return c.node(OpId::softmax_cross_entropy, {c.param("logits", {4, 3}, -2, 2), labels});
       },
       1e-3, 2e-3},
      {"softmax_cross_entropy_3d", OpId::softmax_cross_entropy,
       [](C& c) {
         ValueId labels = c.input("labels", {DType::kI64, {2, 2}}, {1, 0, 2, 2});
         return c.node(OpId::softmax_cross_entropy, {c.param("logits", {2, 2, 3}, -2, 2), labels});
       },
       1e-3, 2e-3},
      {"mse", OpId::mse, [](C& c) { return c.node(OpId::mse, {c.param("prediction", {2, 3}), c.param("target", {2, 3})}); },
       1e-3, 2e-3},
  };
}

class GradientRuleTest : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientRuleTest, MatchesCentralDifferences) {
  const GradientCase& c = GetParam();
  GradientCheck check;
  std::vector<ValueId> results = c.build(check);
  ASSERT_FALSE(::testing::Test::HasFailure());
  check.check(results, c.step, c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, GradientRuleTest, ::testing::ValuesIn(gradientCases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

// The table above checks only ops that have a gradient rule. That every differentiable op's rule
// is checked against finite differences is the op harness's check (tests/ops: an op with a rule and
// no gradient check fails there); communication ops' rules are checked by the next test and by the
// equivalence of partitioned training with one device (tests/e2e/equivalence.sh).
TEST(GradientRules, CasesCheckOpsWithGradientRules) {
  for (const GradientCase& c : gradientCases())
    EXPECT_NE(opDef(c.op).gradient, nullptr) << c.name << " checks an op without a gradient rule";
}

// Each collective's gradient is its transpose: identity for a sum all-reduce (cotangents of
// replicated values are whole on every device), /n for a mean, all-reduce for grad_all_reduce,
// shard_slice for all_gather, all_gather for reduce_scatter and shard_slice, all_to_all reversed.
TEST(GradientRules, CollectivesDifferentiateToTheirTransposes) {
  struct Case {
    OpId op;
    AttrMap attrs;
    std::vector<OpId> backward;  // ops the collective's gradient rule emits (constants aside), in order
  };
  AttrMap group = {{"axis", std::string("tp")}, {"group_size", int64_t{2}}};
  auto with = [&](AttrMap extra) {
    extra.insert(group.begin(), group.end());
    return extra;
  };
  std::vector<Case> cases = {
      {OpId::all_reduce, with({{"reduce", std::string("sum")}}), {}},
      {OpId::all_reduce, with({{"reduce", std::string("mean")}}), {OpId::mul}},
      {OpId::grad_all_reduce, group, {OpId::all_reduce}},
      {OpId::all_gather, with({{"dim", int64_t{1}}}), {OpId::shard_slice}},
      {OpId::reduce_scatter, with({{"dim", int64_t{1}}}), {OpId::all_gather}},
      {OpId::shard_slice, with({{"dim", int64_t{1}}}), {OpId::all_gather}},
      {OpId::all_to_all, with({{"split_dim", int64_t{0}}, {"concat_dim", int64_t{1}}}), {OpId::all_to_all}},
  };
  for (const Case& c : cases) {
    Graph graph;
    ValueId x = *graph.addParam("x", {DType::kF32, {4, 4}}, Initializer{});
    ValueId y = (*graph.addNode(c.op, {x}, c.attrs))[0];
    ValueId loss = (*graph.addNode(OpId::reduce_sum, {y}, {{"keepdims", int64_t{0}}}))[0];
    size_t forward_nodes = graph.nodes.size();
    ASSERT_TRUE(appendBackward(graph, loss)) << opName(c.op);
    // The reduce_sum's backward emits constants and expands; the collective's rule emits the rest.
    std::vector<OpId> emitted;
    for (size_t i = forward_nodes; i < graph.nodes.size(); ++i)
      if (graph.nodes[i].op != OpId::expand && graph.nodes[i].op != OpId::constant) emitted.push_back(graph.nodes[i].op);
    EXPECT_EQ(emitted, c.backward) << opName(c.op);
    ValueId grad = graph.findValue("x.grad");
    ASSERT_NE(grad, kNoValue) << opName(c.op);
    EXPECT_EQ(graph.values[grad].type, graph.values[x].type) << opName(c.op);
    if (c.op == OpId::all_to_all) {
      const Node& back = graph.nodes[graph.values[grad].producer];
      EXPECT_EQ(std::get<int64_t>(back.attrs.at("split_dim")), 1);
      EXPECT_EQ(std::get<int64_t>(back.attrs.at("concat_dim")), 0);
    }
  }
}

TEST(GradientRules, NonDifferentiableOpsHaveNoRule) {
  for (OpId op : {OpId::equal, OpId::less, OpId::less_equal, OpId::greater, OpId::greater_equal, OpId::constant,
                  OpId::relu_grad, OpId::softmax_cross_entropy_grad, OpId::sgd_update, OpId::adamw_update})
    EXPECT_EQ(opDef(op).gradient, nullptr) << opName(op);
}

// Ties share the gradient evenly, as PyTorch's amax: [1, 3, 3] -> [0, 0.5, 0.5].
TEST(GradientRules, ReduceMaxSplitsTiesEvenly) {
  GradientCheck c;
  ValueId x = c.paramWithValues("x", {DType::kF64, {2, 3}}, {1, 3, 3, 2, 0, 2});
  ValueId max = c.node(OpId::reduce_max, {x}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}})[0];
  ValueId loss = c.node(OpId::reduce_sum, {max}, {{"keepdims", int64_t{0}}})[0];
  ASSERT_TRUE(appendBackward(c.graph, loss));
  auto values = test::evaluateGraph(c.graph, c.feeds);
  ASSERT_TRUE(values) << values.status().message();
  EXPECT_EQ(test::toDoubles(values->at("x.grad")), (std::vector<double>{0, 0.5, 0.5, 0.5, 0, 0.5}));
}

TEST(GradientContext, ScalarTensorConvertsToEachDType) {
  auto bits16 = [](double v, DType d) {
    auto t = scalarTensor(v, d);
    return static_cast<int>(t->as<uint16_t>()[0]);
  };
  EXPECT_EQ(bits16(1.0, DType::kF16), 0x3c00);
  EXPECT_EQ(bits16(-2.0, DType::kF16), 0xc000);
  EXPECT_EQ(bits16(1e5, DType::kF16), 0x7c00);       // overflows to infinity
  EXPECT_EQ(bits16(0x1.0p-24, DType::kF16), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits16(1.0, DType::kBF16), 0x3f80);
  EXPECT_EQ(bits16(1.00390625, DType::kBF16), 0x3f80);  // a tie rounds to even
  EXPECT_EQ(scalarTensor(0.1, DType::kF32)->as<float>()[0], 0.1f);
  EXPECT_EQ(scalarTensor(-3.7, DType::kI64)->as<int64_t>()[0], -3);
  EXPECT_EQ(scalarTensor(2.0, DType::kBool)->as<uint8_t>()[0], 1);
  EXPECT_EQ(scalarTensor(1.0, DType::kF64)->type, (TensorType{DType::kF64, {}}));
}

// ---------------------------------------------------------------------------------------------
// Autodiff: names, accumulation, which parameters get gradients, and diagnostics.

using test::parse;

std::string backwardError(std::string_view text) {
  Graph graph = parse(text);
  Status status = appendBackward(graph, graph.outputs.at(0));
  EXPECT_FALSE(status) << printGraph(graph);
  return status.message();
}

TEST(Autodiff, NamesParameterGradientsAndCopiesSharedOnes) {
  // d(sum(p + q))/dp and /dq are the same tensor: q gets an identity copy with its own name.
  Graph graph = parse(R"(graph @g {
    param %p : f64[3] = zeros
    param %q : f64[3] = zeros
    param %unused : f64[3] = zeros
    param %frozen : f64[3] = zeros frozen
    %s = add(%p, %q)
    %t = mul(%s, %frozen)
    %loss = reduce_sum(%t) {keepdims = 0}
    output %loss
  })");
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss")));
  ASSERT_TRUE(verifyGraph(graph));
  ValueId p_grad = graph.findValue("p.grad"), q_grad = graph.findValue("q.grad");
  ASSERT_NE(p_grad, kNoValue);
  ASSERT_NE(q_grad, kNoValue);
  EXPECT_EQ(graph.nodes[graph.values[q_grad].producer].op, OpId::identity);
  EXPECT_EQ(graph.nodes[graph.values[q_grad].producer].operands[0], p_grad);
  EXPECT_EQ(graph.findValue("unused.grad"), kNoValue);
  EXPECT_EQ(graph.findValue("frozen.grad"), kNoValue);
  EXPECT_NE(graph.findValue("loss.grad"), kNoValue);
}

TEST(Autodiff, AddsGradientsOfAValueUsedTwiceInProgramOrder) {
  Graph graph = parse(R"(graph @g {
    param %w : f64[2] = zeros
    %a = exp(%w)
    %b = neg(%w)
    %c = add(%a, %b)
    %loss = reduce_sum(%c) {keepdims = 0}
    output %loss
  })");
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss")));
  ValueId grad = graph.findValue("w.grad");
  ASSERT_NE(grad, kNoValue);
  const Node& sum = graph.nodes[graph.values[grad].producer];
  ASSERT_EQ(sum.op, OpId::add);
  // Contributions are added in the program order of the users: exp's (the earlier user) first.
  EXPECT_EQ(graph.nodes[graph.values[sum.operands[0]].producer].op, OpId::mul);
  EXPECT_EQ(graph.nodes[graph.values[sum.operands[1]].producer].op, OpId::neg);
}

TEST(Autodiff, BackwardNodesCarryTheForwardLocation) {
  Graph graph = parse("graph @g {\n  param %w : f64[2] = zeros\n  %e = exp(%w)\n  %loss = reduce_sum(%e) {keepdims = 0}\n"
                      "  output %loss\n}\n");
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss")));
  const Node& grad = graph.nodes[graph.values[graph.findValue("w.grad")].producer];
  EXPECT_EQ(grad.op, OpId::mul);
  EXPECT_EQ(grad.loc.str(), "t.cir:3:3");
}

TEST(Autodiff, StopsAtIntegerValues) {
  // The argmax-like integer path carries no gradient; the float path does.
  Graph graph = parse(R"(graph @g {
    param %w : f64[4] = zeros
    %i = cast(%w) {to = "i64"}
    %f = cast(%i) {to = "f64"}
    %m = mul(%f, %w)
    %loss = reduce_sum(%m) {keepdims = 0}
    output %loss
  })");
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss")));
  ValueId grad = graph.findValue("w.grad");
  ASSERT_NE(grad, kNoValue);
  EXPECT_EQ(graph.nodes[graph.values[grad].producer].op, OpId::mul);
}

TEST(Autodiff, RejectsANonDifferentiableOpOnThePath) {
  std::string message = backwardError(R"(graph @g {
    input %dy : f32[3]
    param %w : f32[3] = zeros
    %g = relu_grad(%dy, %w)
    %loss = reduce_sum(%g) {keepdims = 0}
    output %loss
  })");
  EXPECT_EQ(message,
            "t.cir:4:5: relu_grad '%g': op 'relu_grad' is not differentiable, but it lies between the parameter "
            "'%w' and the loss '%loss'");
}

TEST(Autodiff, RejectsDropoutWithARatio) {
  std::string message = backwardError(R"(graph @g {
    param %w : f32[3] = zeros
    %d = dropout(%w) {ratio = 0.1}
    %loss = reduce_sum(%d) {keepdims = 0}
    output %loss
  })");
  EXPECT_EQ(message, "t.cir:3:5: dropout '%d': dropout with ratio > 0 cannot be trained yet (set ratio = 0 or remove the dropout)");
}

TEST(Autodiff, RejectsBadLosses) {
  EXPECT_EQ(backwardError("graph @g {\n param %w : f32[3] = zeros\n %e = exp(%w)\n output %e\n}\n"),
            "autodiff: the loss '%e' must be a float scalar, got f32[3]");
  EXPECT_EQ(backwardError("graph @g {\n input %x : f32[3]\n %l = reduce_sum(%x) {keepdims = 0}\n output %l\n}\n"),
            "autodiff: the loss '%l' depends on no trainable parameter");
  EXPECT_EQ(backwardError("graph @g {\n param %w : f32[3] = zeros\n %w.grad = exp(%w)\n"
                          " %l = reduce_sum(%w.grad) {keepdims = 0}\n output %l\n}\n"),
            "autodiff: the gradient of parameter '%w' is named '%w.grad', but the graph already has a value of that name");
}

TEST(Autodiff, OnlyDifferentiatesTheRequestedParameters) {
  Graph graph = parse(R"(graph @g {
    param %a : f64[2] = zeros
    param %b : f64[2] = zeros
    %m = mul(%a, %b)
    %loss = reduce_sum(%m) {keepdims = 0}
    output %loss
  })");
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss"), AutodiffOptions{{graph.findValue("b")}}));
  EXPECT_EQ(graph.findValue("a.grad"), kNoValue);
  EXPECT_NE(graph.findValue("b.grad"), kNoValue);
  // Only the nodes b's gradient needs remain: the seed, its expansion and one mul.
  EXPECT_EQ(graph.nodes.size(), 5u) << printGraph(graph);
}

// ---------------------------------------------------------------------------------------------
// Loss heads.

const char* kTwoLayerModel = R"(graph @model {
  input %x : f32[6,4]
  param %w1 : f32[5,4] = zeros
  param %b1 : f32[5] = zeros
  param %w2 : f32[3,5] = zeros
  param %b2 : f32[3] = zeros
  %h = matmul(%x, %w1) {transpose_b = 1}
  %hb = add(%h, %b1)
  %a = relu(%hb)
  %o = matmul(%a, %w2) {transpose_b = 1}
  %logits = add(%o, %b2)
  output %logits
})";

TEST(LossHead, SoftmaxCrossEntropyAddsLabelsAndTheLoss) {
  Graph graph = parse(kTwoLayerModel);
  auto loss = attachLoss(graph, LossKind::kSoftmaxCrossEntropy);
  ASSERT_TRUE(loss) << loss.status().message();
  EXPECT_EQ(graph.values[*loss].name, "loss");
  EXPECT_EQ(graph.values[*loss].type, (TensorType{DType::kF32, {}}));
  EXPECT_EQ(graph.outputs, std::vector<ValueId>{*loss});
  ValueId labels = graph.findValue("labels");
  ASSERT_TRUE(graph.isInput(labels));
  EXPECT_EQ(graph.values[labels].type, (TensorType{DType::kI64, {6}}));
  EXPECT_TRUE(verifyGraph(graph));
}

TEST(LossHead, MseAddsTargetsShapedLikeTheOutput) {
  Graph graph = parse(kTwoLayerModel);
  auto loss = attachLoss(graph, LossKind::kMse, "logits");
  ASSERT_TRUE(loss) << loss.status().message();
  EXPECT_EQ(graph.values[graph.findValue("targets")].type, (TensorType{DType::kF32, {6, 3}}));
  EXPECT_EQ(graph.nodes.back().op, OpId::mse);
}

TEST(LossHead, Errors) {
  Graph two_outputs = parse(R"(graph @g {
    input %x : f32[2,3]
    %a = relu(%x)
    %b = exp(%x)
    output %a, %b
  })");
  Graph copy = two_outputs;
  EXPECT_EQ(attachLoss(copy, LossKind::kSoftmaxCrossEntropy).status().message(),
            "loss: the model has 2 float outputs (outputs: '%a', '%b'); name the one the loss reads");
  copy = two_outputs;
  EXPECT_EQ(attachLoss(copy, LossKind::kMse, "c").status().message(),
            "loss: the model has no output '%c' (outputs: '%a', '%b')");
  copy = two_outputs;
  EXPECT_TRUE(attachLoss(copy, LossKind::kSoftmaxCrossEntropy, "b"));
  copy = two_outputs;
  ASSERT_TRUE(copy.addInput("labels", {DType::kI64, {2}}));
  EXPECT_EQ(attachLoss(copy, LossKind::kSoftmaxCrossEntropy, "a").status().message(),
            "loss: the model already has a value named '%labels', the name the loss head gives its input");
  EXPECT_EQ(parseLossKind("hinge").status().kind(), ErrorKind::kUsage);
  EXPECT_EQ(*parseLossKind("mse"), LossKind::kMse);
}

// ---------------------------------------------------------------------------------------------
// Optimizers: spec parsing and the update ops over three steps against PyTorch.

TEST(OptimizerSpec, ParsesPyTorchDefaults) {
  auto sgd = parseOptimizerSpec("sgd");
  ASSERT_TRUE(sgd);
  EXPECT_EQ(sgd->kind, OptimizerKind::kSgd);
  EXPECT_EQ(sgd->lr, 0.01);
  EXPECT_EQ(sgd->momentum, 0.0);
  EXPECT_EQ(sgd->weight_decay, 0.0);
  auto adamw = parseOptimizerSpec("adamw");
  ASSERT_TRUE(adamw);
  EXPECT_EQ(adamw->kind, OptimizerKind::kAdamW);
  EXPECT_EQ(adamw->lr, 1e-3);
  EXPECT_EQ(adamw->beta1, 0.9);
  EXPECT_EQ(adamw->beta2, 0.999);
  EXPECT_EQ(adamw->eps, 1e-8);
  EXPECT_EQ(adamw->weight_decay, 0.01);
}

TEST(OptimizerSpec, ParsesEveryKey) {
  auto sgd = parseOptimizerSpec("sgd:lr=0.1,momentum=0.9,weight_decay=1e-4,dampening=0,nesterov=1");
  ASSERT_TRUE(sgd) << sgd.status().message();
  EXPECT_EQ(sgd->lr, 0.1);
  EXPECT_EQ(sgd->momentum, 0.9);
  EXPECT_EQ(sgd->weight_decay, 1e-4);
  EXPECT_TRUE(sgd->nesterov);
  auto adamw = parseOptimizerSpec("adamw:lr=3e-4;wd=0;beta1=0.8;beta2=0.95;eps=1e-6");
  ASSERT_TRUE(adamw) << adamw.status().message();
  EXPECT_EQ(adamw->lr, 3e-4);
  EXPECT_EQ(adamw->weight_decay, 0.0);
  EXPECT_EQ(adamw->beta1, 0.8);
  EXPECT_EQ(adamw->beta2, 0.95);
  EXPECT_EQ(adamw->eps, 1e-6);
}

TEST(OptimizerSpec, RejectsBadSpecsAsUsageErrors) {
  auto error = [](std::string_view text) {
    auto spec = parseOptimizerSpec(text);
    EXPECT_FALSE(spec) << text;
    EXPECT_EQ(spec.status().kind(), ErrorKind::kUsage) << text;
    return spec.status().message();
  };
  EXPECT_EQ(error("sgd:lr=0.1,beta1=0.9"),
            "bad optimizer 'sgd:lr=0.1,beta1=0.9': unknown key 'beta1' (keys: lr, momentum, dampening, weight_decay (wd), "
            "nesterov)");
  EXPECT_EQ(error("adamw:momentum=0.9"),
            "bad optimizer 'adamw:momentum=0.9': unknown key 'momentum' (keys: lr, beta1, beta2, eps, weight_decay (wd))");
  EXPECT_EQ(error("adam:lr=1"),
            "bad optimizer 'adam:lr=1': unknown optimizer 'adam' (expected sgd[:key=value,...] or adamw[:key=value,...])");
  EXPECT_EQ(error("sgd:lr=fast"), "bad optimizer 'sgd:lr=fast': 'lr' needs a finite number, got 'fast'");
  EXPECT_EQ(error("sgd:lr"), "bad optimizer 'sgd:lr': expected key=value, got 'lr'");
  EXPECT_EQ(error("sgd:wd=0.1,weight_decay=0.2"),
            "bad optimizer 'sgd:wd=0.1,weight_decay=0.2': 'weight_decay' is given twice");
  EXPECT_EQ(error("sgd:nesterov=1"), "bad optimizer 'sgd:nesterov=1': nesterov needs momentum > 0 and dampening 0");
  EXPECT_EQ(error("adamw:beta2=1"), "bad optimizer 'adamw:beta2=1': beta1 and beta2 must be in [0, 1)");
  EXPECT_EQ(error("sgd:lr=-1"), "bad optimizer 'sgd:lr=-1': lr must be >= 0");
}

const std::vector<double> kInitialWeights = {0.5, -1.0, 2.0, 0.25};
const std::vector<std::vector<double>> kStepGradients = {
    {0.1, -0.2, 0.3, 0.0}, {-0.4, 0.5, 0.05, 1.0}, {0.2, 0.2, -0.3, -0.5}};

// The weights after three steps of `spec` with kStepGradients fed as w.grad, through the graph.
std::vector<double> runOptimizerGraph(const OptimizerSpec& spec) {
  Graph graph;
  TensorType type{DType::kF64, {4}};
  EXPECT_TRUE(graph.addParam("w", type, Initializer{}));
  EXPECT_TRUE(graph.addInput("w.grad", type));
  Status appended = appendOptimizer(graph, spec);
  EXPECT_TRUE(appended) << appended.message();
  EXPECT_TRUE(verifyGraph(graph)) << printGraph(graph);
  TensorMap state = {{"w", test::makeTensor(type, kInitialWeights)}};
  for (const Param& p : graph.params)
    if (graph.values[p.value].name != "w")
      state[graph.values[p.value].name] = test::makeTensor(graph.values[p.value].type, {});  // zeros
  for (const auto& gradient : kStepGradients) {
    state["w.grad"] = test::makeTensor(type, gradient);
    auto values = test::evaluateGraph(graph, state);
    EXPECT_TRUE(values) << values.status().message();
    if (!values) return {};
    state = test::applyUpdates(graph, *values, state);
  }
  EXPECT_EQ(test::toDoubles(state["step"]), std::vector<double>{3});
  return test::toDoubles(state["w"]);
}

// PyTorch's SGD, written out (torch/optim/sgd.py).
std::vector<double> referenceSgd(const OptimizerSpec& s) {
  std::vector<double> w = kInitialWeights, buffer(4, 0.0);
  for (size_t step = 0; step < kStepGradients.size(); ++step)
    for (size_t i = 0; i < w.size(); ++i) {
      double d = kStepGradients[step][i] + s.weight_decay * w[i];
      if (s.momentum != 0) {
        buffer[i] = step == 0 ? d : s.momentum * buffer[i] + (1 - s.dampening) * d;
        d = s.nesterov ? d + s.momentum * buffer[i] : buffer[i];
      }
      w[i] -= s.lr * d;
    }
  return w;
}

// PyTorch's AdamW, written out (torch/optim/adamw.py, amsgrad off).
std::vector<double> referenceAdamW(const OptimizerSpec& s) {
  std::vector<double> w = kInitialWeights, m(4, 0.0), v(4, 0.0);
  for (size_t step = 0; step < kStepGradients.size(); ++step) {
    double t = static_cast<double>(step + 1);
    for (size_t i = 0; i < w.size(); ++i) {
      double g = kStepGradients[step][i];
      w[i] *= 1 - s.lr * s.weight_decay;
      m[i] = s.beta1 * m[i] + (1 - s.beta1) * g;
      v[i] = s.beta2 * v[i] + (1 - s.beta2) * g * g;
      double bias1 = 1 - std::pow(s.beta1, t), bias2 = 1 - std::pow(s.beta2, t);
      w[i] -= s.lr / bias1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias2) + s.eps);
    }
  }
  return w;
}

void expectClose(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
}

struct OptimizerCase {
  const char* spec;
  std::vector<double> pytorch;  // torch.optim after three steps (torch 1.13, f64)
};

TEST(OptimizerOps, ThreeStepsMatchPyTorch) {
  const OptimizerCase cases[] = {
      {"sgd:lr=0.1", {0.51, -1.05, 1.995, 0.2}},
      {"sgd:lr=0.1,momentum=0.9,dampening=0.1,weight_decay=0.01",
       {0.520643906495, -1.04401211299, 1.92662508408, 0.12275205729749998}},
      {"sgd:lr=0.1,momentum=0.9,nesterov=1,weight_decay=0.01",
       {0.5319509619805, -1.096710223961, 1.924536586512, 0.07235222528524997}},
      {"adamw:lr=0.1,beta1=0.8,beta2=0.99,eps=1e-6,weight_decay=0.05",
       {0.4627424805091771, -0.9936654071532116, 1.8077286388760732, 0.14926138787435103}},
      {"adamw", {0.4996546917895055, -0.9999551741590276, 1.998174654322714, 0.24901973033110184}},
  };
  for (const OptimizerCase& c : cases) {
    SCOPED_TRACE(c.spec);
    auto spec = parseOptimizerSpec(c.spec);
    ASSERT_TRUE(spec);
    std::vector<double> reference = spec->kind == OptimizerKind::kSgd ? referenceSgd(*spec) : referenceAdamW(*spec);
    expectClose(reference, c.pytorch, 1e-12);
    expectClose(runOptimizerGraph(*spec), reference, 1e-12);
  }
}

TEST(OptimizerOps, AddsStateParametersAndUpdates) {
  Graph graph = parse(kTwoLayerModel);
  ASSERT_TRUE(attachLoss(graph, LossKind::kSoftmaxCrossEntropy));
  ASSERT_TRUE(appendBackward(graph, graph.findValue("loss")));
  ASSERT_TRUE(appendOptimizer(graph, *parseOptimizerSpec("adamw")));
  ASSERT_TRUE(verifyGraph(graph));
  std::set<std::string> frozen, updated;
  for (const Param& p : graph.params)
    if (!p.trainable) frozen.insert(graph.values[p.value].name);
  for (const StateUpdate& u : graph.updates) updated.insert(graph.values[u.target].name);
  std::set<std::string> expected_state = {"step"};
  for (const char* p : {"w1", "b1", "w2", "b2"}) {
    expected_state.insert(std::string(p) + ".exp_avg");
    expected_state.insert(std::string(p) + ".exp_avg_sq");
  }
  EXPECT_EQ(frozen, expected_state);
  std::set<std::string> expected_updates = expected_state;
  expected_updates.insert({"w1", "b1", "w2", "b2"});
  EXPECT_EQ(updated, expected_updates);
  EXPECT_EQ(graph.values[graph.findValue("step")].type, (TensorType{DType::kI64, {}}));

  Graph untrained = parse(kTwoLayerModel);
  EXPECT_EQ(appendOptimizer(untrained, OptimizerSpec{}).message(),
            "optimizer: no trainable parameter has a gradient '%<param>.grad' (run autodiff first)");
}

// ---------------------------------------------------------------------------------------------
// The training pipeline end to end: a two-layer MLP trained five steps, against PyTorch.

// Deterministic data and weights (the same formulas as the PyTorch reference below).
TensorMap mlpFeeds() {
  std::vector<double> x, labels, w1, b1, w2, b2;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) x.push_back(std::sin(0.5 * i + 0.3 * j));
  for (int i = 0; i < 6; ++i) labels.push_back(i % 3);
  for (int k = 0; k < 5; ++k)
    for (int j = 0; j < 4; ++j) w1.push_back(0.3 * std::cos(0.7 * k + 0.2 * j + 0.1));
  for (int k = 0; k < 5; ++k) b1.push_back(0.05 * k - 0.1);
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 5; ++k) w2.push_back(0.4 * std::sin(0.9 * c - 0.4 * k + 0.3));
  b2 = {0.1, -0.05, 0.0};
  return {{"x", test::makeTensor({DType::kF32, {6, 4}}, x)},
          {"labels", test::makeTensor({DType::kI64, {6}}, labels)},
          {"w1", test::makeTensor({DType::kF32, {5, 4}}, w1)},
          {"b1", test::makeTensor({DType::kF32, {5}}, b1)},
          {"w2", test::makeTensor({DType::kF32, {3, 5}}, w2)},
          {"b2", test::makeTensor({DType::kF32, {3}}, b2)}};
}

// Losses of five training steps on one batch; optimizer state starts at zeros.
std::vector<double> trainFiveSteps(const std::string& optimizer) {
  TrainingOptions options;
  options.optimizer = *parseOptimizerSpec(optimizer);
  auto graphs = buildTrainingGraphs(parse(kTwoLayerModel), options);
  EXPECT_TRUE(graphs) << graphs.status().message();
  if (!graphs) return {};
  const Graph& train = graphs->train;
  TensorMap state = mlpFeeds();
  for (const Param& p : train.params) {
    const Value& v = train.values[p.value];
    if (!state.count(v.name)) state[v.name] = test::makeTensor(v.type, {});  // optimizer state starts at zeros
  }
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    auto values = test::evaluateGraph(train, state);
    EXPECT_TRUE(values) << values.status().message();
    if (!values) return {};
    losses.push_back(test::toDoubles(values->at("loss"))[0]);
    state = test::applyUpdates(train, *values, state);
  }
  return losses;
}

// Reference: torch 1.13, f32, the same data; logits = relu(x @ w1.T + b1) @ w2.T + b2,
// cross_entropy(logits, labels), torch.optim.SGD(lr=0.5, momentum=0.9) / AdamW(lr=0.05).
TEST(TrainingPipeline, MlpLossTrajectoriesMatchPyTorch) {
  std::vector<double> sgd = trainFiveSteps("sgd:lr=0.5,momentum=0.9");
  expectClose(sgd, {1.0987790822982788, 1.0942670106887817, 1.0875533819198608, 1.0824265480041504, 1.0791730880737305},
              2e-6);
  std::vector<double> adamw = trainFiveSteps("adamw:lr=0.05");
  expectClose(adamw, {1.0987790822982788, 1.085921287536621, 1.0805915594100952, 1.0706955194473267, 1.0664502382278442},
              2e-6);
  for (size_t i = 1; i < adamw.size(); ++i) {
    EXPECT_LT(sgd[i], sgd[i - 1]);
    EXPECT_LT(adamw[i], adamw[i - 1]);
  }
}

TEST(TrainingPipeline, BuildsTrainAndEvalGraphs) {
  Graph model = parse(kTwoLayerModel);
  TrainingOptions options;
  options.optimizer = *parseOptimizerSpec("sgd:lr=0.1,momentum=0.9");
  auto graphs = buildTrainingGraphs(model, options);
  ASSERT_TRUE(graphs) << graphs.status().message();
  const Graph& train = graphs->train;
  const Graph& eval = graphs->eval;
  ASSERT_EQ(train.outputs.size(), 1u);
  EXPECT_EQ(train.values[train.outputs[0]].name, "loss");
  EXPECT_EQ(train.updates.size(), 9u);  // 4 parameters, 4 momentum buffers, the step
  for (const char* p : {"w1", "b1", "w2", "b2"}) {
    EXPECT_NE(train.findValue(std::string(p) + ".grad"), kNoValue) << p;
    EXPECT_NE(train.findValue(std::string(p) + ".momentum"), kNoValue) << p;
    EXPECT_NE(eval.findValue(p), kNoValue) << p;
    EXPECT_TRUE(eval.findParam(eval.findValue(p))) << p;
  }
  ASSERT_EQ(eval.outputs.size(), 2u);
  EXPECT_EQ(eval.values[eval.outputs[0]].name, "logits");
  EXPECT_EQ(eval.values[eval.outputs[1]].name, "loss");
  EXPECT_TRUE(eval.isInput(eval.findValue("labels")));
  EXPECT_TRUE(eval.updates.empty());
  // Two forward matmuls and three backward ones (dw2, da, dw1): the input x gets no gradient.
  int matmuls = 0;
  for (const Node& node : train.nodes) matmuls += node.op == OpId::matmul ? 1 : 0;
  EXPECT_EQ(matmuls, 5) << printGraph(train);

  auto inference = buildInferenceGraph(model);
  ASSERT_TRUE(inference);
  EXPECT_EQ(printGraph(*inference), printGraph(model));
}

// Parameter values from each parameter's initializer; inputs from a fixed pattern (integer
// inputs and the labels within [0, classes)).
TensorMap initialFeeds(const Graph& train, int64_t classes) {
  TensorMap feeds;
  for (const Param& p : train.params) {
    const Value& v = train.values[p.value];
    TensorData tensor{v.type, std::vector<uint8_t>(static_cast<size_t>(v.type.bytes()))};
    runtime::InitializerSpec spec{p.init.kind, p.init.args, {}};
    Status filled = runtime::runInitializer(spec, v.type, tensor.bytes.data());
    EXPECT_TRUE(filled) << v.name << ": " << filled.message();
    feeds[v.name] = std::move(tensor);
  }
  for (ValueId input : train.inputs) {
    const Value& v = train.values[input];
    std::vector<double> elements(static_cast<size_t>(v.type.numel()));
    for (size_t i = 0; i < elements.size(); ++i)
      elements[i] = isFloat(v.type.dtype) ? std::sin(0.7 * static_cast<double>(i)) : static_cast<double>((i * 7 + 3) % classes);
    feeds[v.name] = test::makeTensor(v.type, elements);
  }
  return feeds;
}

// The generated GPT, MLP and CNN train: every op they use has a gradient rule, and a few SGD
// steps on one batch lower the loss.
TEST(TrainingPipeline, GeneratedModelsTrain) {
  struct Model {
    const char* name;
    Expected<Graph> graph;
    int64_t classes;
  };
  Model models[] = {
      {"mlp", generateMlp(MlpSpec{.input = 8, .hidden = {6}, .classes = 3, .batch = 4}), 3},
      {"cnn", generateCnn(CnnSpec{.batch = 2, .channels = 1, .height = 8, .width = 8, .classes = 3}), 3},
      {"gpt", generateGpt(GptSpec{.layers = 1, .hidden = 8, .heads = 2, .seq = 4, .vocab = 11, .batch = 2}), 11},
  };
  for (Model& model : models) {
    SCOPED_TRACE(model.name);
    ASSERT_TRUE(model.graph) << model.graph.status().message();
    TrainingOptions options;
    options.optimizer = *parseOptimizerSpec("sgd:lr=0.05,momentum=0.9");
    auto graphs = buildTrainingGraphs(*model.graph, options);
    ASSERT_TRUE(graphs) << graphs.status().message();
    TensorMap state = initialFeeds(graphs->train, model.classes);
    std::vector<double> losses;
    for (int step = 0; step < 4; ++step) {
      auto values = test::evaluateGraph(graphs->train, state);
      ASSERT_TRUE(values) << values.status().message();
      losses.push_back(test::toDoubles(values->at("loss"))[0]);
      state = test::applyUpdates(graphs->train, *values, state);
    }
    EXPECT_TRUE(std::isfinite(losses.back()));
    EXPECT_LT(losses.back(), losses.front()) << losses[0] << " " << losses[1] << " " << losses[2] << " " << losses[3];
  }
}

// A gradient rule's arithmetic on constants is folded: pow's gradient reads x^(2 - 1) with the
// exponent a constant (a fused body's literal), not a sub of two constants computed every step
// (which a fused body took as a tensor operand and evaluated with powf per element).
TEST(TrainingPipeline, GradientScalarsOfConstantsAreFolded) {
  Graph model = parse(R"(graph @model {
  input %x : f32[6,4]
  param %w : f32[3,4] = zeros
  %two = constant() {value = dense<f32[]: [2]>}
  %h = matmul(%x, %w) {transpose_b = 1}
  %logits = pow(%h, %two)
  output %logits
})");
  TrainingOptions options;
  options.optimizer = *parseOptimizerSpec("sgd:lr=0.1");
  auto graphs = buildTrainingGraphs(model, options);
  ASSERT_TRUE(graphs) << graphs.status().message();
  const Graph& train = graphs->train;
  int pows = 0;
  for (const Node& node : train.nodes) {
    if (node.op != OpId::pow) continue;
    ++pows;
    const int32_t exponent = train.values[node.operands[1]].producer;
    ASSERT_GE(exponent, 0) << printGraph(train);
    EXPECT_EQ(train.nodes[exponent].op, OpId::constant) << printGraph(train);
  }
  EXPECT_EQ(pows, 2) << printGraph(train);  // the forward's and the gradient's
  for (const Node& node : train.nodes)
    if (node.op == OpId::sub) {
      bool all_constant = true;
      for (ValueId v : node.operands)
        all_constant = all_constant && train.values[v].producer >= 0 && train.nodes[train.values[v].producer].op == OpId::constant;
      EXPECT_FALSE(all_constant) << "a sub of constants is left: " << printGraph(train);
    }
}

TEST(TrainingPipeline, ErrorsNameTheModelNode) {
  Graph model = parse(R"(graph @g {
    input %x : f32[2,3]
    param %w : f32[3,3] = zeros
    %h = matmul(%x, %w)
    %d = dropout(%h) {ratio = 0.5}
    output %d
  })");
  auto graphs = buildTrainingGraphs(model, TrainingOptions{});
  ASSERT_FALSE(graphs);
  EXPECT_EQ(graphs.status().message(),
            "t.cir:5:5: dropout '%d': dropout with ratio > 0 cannot be trained yet (set ratio = 0 or remove the dropout)");
}

}  // namespace
}  // namespace cleave
