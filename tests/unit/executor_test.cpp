// Tests of the executor, checkpoints, training and inference on small hand-built plans.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "runtime/train/checkpoint.h"
#include "runtime/device/device.h"
#include "runtime/train/evaluation.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/inference.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/trainer.h"
#include "tests/unit/temp_dir.h"

namespace cleave::runtime {
namespace {

// Temporary directories named after this test file.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("cleave-executor") {}
};

// Builds a one-rank plan: buffers get their own 64-byte aligned bytes (aliases share their root's).
class PlanBuilder {
 public:
  PlanBuilder() {
    plan_.set_format_version(kPlanFormatVersion);
    plan_.set_producer("executor_test");
    plan_.set_devices(1);
    auto* strategy = plan_.mutable_strategy();
    strategy->set_dp(1);
    strategy->set_tp(1);
    strategy->set_pp(1);
    strategy->set_microbatches(1);
    rank_ = plan_.add_ranks();
  }

  int32_t buffer(const std::string& name, const TensorType& type, planpb::BufferKind kind = planpb::BUFFER_ACTIVATION,
                 std::optional<int32_t> alias_of = std::nullopt) {
    auto* buffer = rank_->add_buffers();
    int32_t id = rank_->buffers_size() - 1;
    buffer->set_id(id);
    buffer->set_name(name);
    toProto(type, buffer->mutable_type());
    buffer->set_kind(kind);
    if (alias_of) {
      buffer->set_alias_of(*alias_of);
      buffer->set_offset(rank_->buffers(*alias_of).offset());
    } else {
      buffer->set_offset(next_offset_);
      next_offset_ += (type.bytes() + 63) / 64 * 64;
      if (kind == planpb::BUFFER_PARAM || kind == planpb::BUFFER_OPTIMIZER_STATE) persistent_end_ = next_offset_;
    }
    return id;
  }

  // A persistent tensor with its own buffer.
  int32_t parameter(const std::string& name, const TensorType& type, const std::string& init, const AttrMap& args = {},
                    bool optimizer_state = false) {
    int32_t id = buffer(name, type, optimizer_state ? planpb::BUFFER_OPTIMIZER_STATE : planpb::BUFFER_PARAM);
    auto* param = rank_->add_parameters();
    param->set_name(name);
    param->set_buffer(id);
    param->set_trainable(!optimizer_state);
    param->mutable_init()->set_kind(init);
    for (const auto& [key, value] : args) toProto(value, &(*param->mutable_init()->mutable_args())[key]);
    return id;
  }

  planpb::Program* program(const std::string& name) {
    auto* program = rank_->add_programs();
    program->set_name(name);
    return program;
  }

  static void kernel(planpb::Program* program, const std::string& op, std::vector<int32_t> operands,
                     std::vector<int32_t> results, const AttrMap& attrs = {}, const std::string& source = "") {
    auto* inst = program->add_instructions();
    inst->set_kind(planpb::KERNEL);
    inst->set_op(op);
    for (int32_t id : operands) inst->add_operands(id);
    for (int32_t id : results) inst->add_results(id);
    for (const auto& [key, value] : attrs) toProto(value, &(*inst->mutable_attrs())[key]);
    inst->set_source(source);
  }

  static void copy(planpb::Program* program, int32_t from, int32_t to) {
    auto* inst = program->add_instructions();
    inst->set_kind(planpb::COPY);
    inst->add_operands(from);
    inst->add_results(to);
  }

  static void input(planpb::Program* program, const std::string& name, int32_t buffer, int64_t value_limit = 0) {
    auto* named = program->add_inputs();
    named->set_name(name);
    named->set_buffer(buffer);
    named->set_value_limit(value_limit);
  }

  static void output(planpb::Program* program, const std::string& name, int32_t buffer) {
    auto* named = program->add_outputs();
    named->set_name(name);
    named->set_buffer(buffer);
  }

  planpb::Plan& plan() { return plan_; }

  planpb::Plan finish() {
    rank_->set_arena_bytes(next_offset_);
    rank_->set_persistent_bytes(persistent_end_);
    for (auto& program : *rank_->mutable_programs()) program.set_peak_bytes(next_offset_);
    return plan_;
  }

 private:
  planpb::Plan plan_;
  planpb::RankPlan* rank_;
  int64_t next_offset_ = 0;
  int64_t persistent_end_ = 0;
};

Attribute tensorAttr(const TensorType& type, const void* data) {
  auto tensor = std::make_shared<TensorData>();
  tensor->type = type;
  tensor->bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + type.bytes());
  return tensor;
}

// Sets a "data" initializer holding `values` on parameter `index` of rank 0.
template <class T>
void setData(planpb::Plan& plan, int index, const std::vector<T>& values) {
  auto* init = plan.mutable_ranks(0)->mutable_parameters(index)->mutable_init();
  init->set_kind("data");
  init->set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}

// infer: out = relu(x @ w + b), then copied into its output buffer.
planpb::Plan forwardPlan() {
  PlanBuilder b;
  int32_t w = b.parameter("w", {DType::kF32, {3, 4}}, "zeros");
  int32_t bias = b.parameter("b", {DType::kF32, {4}}, "zeros");
  int32_t x = b.buffer("x", {DType::kF32, {2, 3}}, planpb::BUFFER_INPUT);
  int32_t h = b.buffer("h", {DType::kF32, {2, 4}});
  int32_t hb = b.buffer("hb", {DType::kF32, {2, 4}});
  int32_t r = b.buffer("r", {DType::kF32, {2, 4}});
  int32_t out = b.buffer("out", {DType::kF32, {2, 4}}, planpb::BUFFER_OUTPUT);
  auto* infer = b.program("infer");
  PlanBuilder::input(infer, "x", x);
  PlanBuilder::kernel(infer, "matmul", {x, w}, {h}, {}, "model.cir:3:5");
  PlanBuilder::kernel(infer, "add", {h, bias}, {hb}, {}, "model.cir:4:5");
  PlanBuilder::kernel(infer, "relu", {hb}, {r}, {}, "model.cir:5:5");
  PlanBuilder::copy(infer, r, out);
  PlanBuilder::output(infer, "out", out);
  planpb::Plan plan = b.finish();
  setData<float>(plan, 0, {1, 0, -1, 2, 0, 1, 1, -2, 1, 1, 0, 1});
  setData<float>(plan, 1, {0.5f, -0.5f, 0, -10});
  return plan;
}

std::unique_ptr<RankExecutor> makeExecutor(const planpb::Plan& plan, Device& device) {
  Status valid = validatePlan(plan);
  EXPECT_TRUE(valid.isOk()) << valid.message();
  auto executor = createSingleDeviceExecutor(plan, device, ExecutorOptions{2});
  EXPECT_TRUE(executor.hasValue()) << executor.status().message();
  return executor.hasValue() ? std::move(*executor) : nullptr;
}

TEST(ExecutorTest, RunsAForwardProgramWithACopy) {
  auto device = createCpuDevice();
  auto executor = makeExecutor(forwardPlan(), *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  EXPECT_EQ(executor->threads(), 2);
  EXPECT_EQ(executor->programNames(), std::vector<std::string>{"infer"});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(executor->parameter("w")->data) % Device::kArenaAlignment, 0u);

  auto x = executor->input("infer", "x");
  ASSERT_TRUE(x.hasValue());
  float inputs[6] = {1, 2, 3, -1, 0, 2};
  std::memcpy(x->data, inputs, sizeof inputs);
  ASSERT_TRUE(executor->run("infer").isOk());
  auto out = executor->output("infer", "out");
  ASSERT_TRUE(out.hasValue());
  EXPECT_EQ(out->type, (TensorType{DType::kF32, {2, 4}}));
  // x @ w = [[4,5,1,1],[1,2,1,0]]; + b = [[4.5,4.5,1,-9],[1.5,1.5,1,-10]]; relu.
  const float expected[8] = {4.5f, 4.5f, 1, 0, 1.5f, 1.5f, 1, 0};
  const auto* got = static_cast<const float*>(out->data);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], expected[i]) << i;

  EXPECT_EQ(executor->run("train").kind(), ErrorKind::kUsage);
  EXPECT_EQ(executor->input("infer", "y").status().message(), "program 'infer' has no 'y' (it has: x)");
  EXPECT_FALSE(executor->parameter("nope").hasValue());
}

// y[n,o,i,j] = Σ_c,di,dj x[n,c,i+di-1,j+dj-1] · w[o,c,di,dj]: a 3x3 convolution with padding 1.
std::vector<float> naiveConvolution(const std::vector<float>& x, const std::vector<float>& w, int64_t batch,
                                    int64_t channels, int64_t out_channels, int64_t size) {
  std::vector<float> y(static_cast<size_t>(batch * out_channels * size * size), 0.0f);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t o = 0; o < out_channels; ++o)
      for (int64_t i = 0; i < size; ++i)
        for (int64_t j = 0; j < size; ++j) {
          double sum = 0;
          for (int64_t c = 0; c < channels; ++c)
            for (int64_t di = 0; di < 3; ++di)
              for (int64_t dj = 0; dj < 3; ++dj) {
                const int64_t r = i + di - 1, q = j + dj - 1;
                if (r < 0 || r >= size || q < 0 || q >= size) continue;
                sum += x[static_cast<size_t>(((n * channels + c) * size + r) * size + q)] *
                       w[static_cast<size_t>(((o * channels + c) * 3 + di) * 3 + dj)];
              }
          y[static_cast<size_t>(((n * out_channels + o) * size + i) * size + j)] = static_cast<float>(sum);
        }
  return y;
}

// Kernels may keep a prepared copy of constant weights (KernelCall::constant_operands): two
// convolutions of the same shapes with their own weights, weights rewritten through parameter(),
// and weights that one of the plan's own programs writes must all give fresh results. Images of
// `size` x `size`, padded by 1 for 3x3 kernels.
void expectConvolutionsNeverUseStaleWeights(int64_t size) {
  const int64_t batch = 2, channels = 3, out_channels = 8;
  const TensorType x_type{DType::kF32, {batch, channels, size, size}}, w_type{DType::kF32, {out_channels, channels, 3, 3}};
  const TensorType y_type{DType::kF32, {batch, out_channels, size, size}};
  PlanBuilder b;
  const int32_t w_fixed = b.parameter("w_fixed", w_type, "zeros");
  const int32_t w_other = b.parameter("w_other", w_type, "zeros");
  const int32_t w_updated = b.parameter("w_updated", w_type, "zeros");
  const int32_t x = b.buffer("x", x_type, planpb::BUFFER_INPUT);
  const int32_t new_w = b.buffer("new_w", w_type, planpb::BUFFER_INPUT);
  int32_t y[3];
  for (int32_t& id : y) id = b.buffer("y" + std::to_string(&id - y), y_type, planpb::BUFFER_OUTPUT);
  const AttrMap pads = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  auto* infer = b.program("infer");
  PlanBuilder::input(infer, "x", x);
  PlanBuilder::kernel(infer, "conv2d", {x, w_fixed}, {y[0]}, pads);
  PlanBuilder::kernel(infer, "conv2d", {x, w_other}, {y[1]}, pads);
  PlanBuilder::kernel(infer, "conv2d", {x, w_updated}, {y[2]}, pads);
  for (int i = 0; i < 3; ++i) PlanBuilder::output(infer, "y" + std::to_string(i), y[i]);
  auto* update = b.program("update");  // writes w_updated: it is not a constant
  PlanBuilder::input(update, "new_w", new_w);
  PlanBuilder::copy(update, new_w, w_updated);
  planpb::Plan plan = b.finish();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto randomValues = [&](const TensorType& type) {
    std::vector<float> values(static_cast<size_t>(type.numel()));
    for (float& v : values) v = uniform(rng);
    return values;
  };
  std::vector<std::vector<float>> weights = {randomValues(w_type), randomValues(w_type), randomValues(w_type)};
  for (int i = 0; i < 3; ++i) setData<float>(plan, i, weights[static_cast<size_t>(i)]);
  auto device = createCpuDevice();
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  const std::vector<float> inputs = randomValues(x_type);
  std::memcpy(executor->input("infer", "x")->data, inputs.data(), static_cast<size_t>(x_type.bytes()));
  auto expectOutputs = [&](const std::string& when) {
    ASSERT_TRUE(executor->run("infer").isOk());
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> expected = naiveConvolution(inputs, weights[static_cast<size_t>(i)], batch, channels,
                                                           out_channels, size);
      const auto* got = static_cast<const float*>(executor->output("infer", "y" + std::to_string(i))->data);
      for (size_t k = 0; k < expected.size(); ++k)
        ASSERT_NEAR(got[k], expected[k], 1e-4) << when << ": y" << i << " element " << k;
    }
  };
  expectOutputs("first run");
  expectOutputs("second run");
  weights[0] = randomValues(w_type);  // written from outside the plan
  std::memcpy(executor->parameter("w_fixed")->data, weights[0].data(), static_cast<size_t>(w_type.bytes()));
  expectOutputs("after parameter() wrote w_fixed");
  weights[2] = randomValues(w_type);  // written by the plan's own update program
  std::memcpy(executor->input("update", "new_w")->data, weights[2].data(), static_cast<size_t>(w_type.bytes()));
  ASSERT_TRUE(executor->run("update").isOk());
  expectOutputs("after the update program wrote w_updated");
}

TEST(ExecutorTest, KernelsNeverComputeWithAStaleCopyOfTheWeights) { expectConvolutionsNeverUseStaleWeights(6); }

// Output planes of 2x2 run as one matmul over the batch (onednn_convolution.cpp), with packed weights.
TEST(ExecutorTest, TinyConvolutionsNeverComputeWithAStaleCopyOfTheWeights) { expectConvolutionsNeverUseStaleWeights(2); }

// Matrix products with constant weights run on oneDNN with the weights packed once: the products
// of an inference plan (matmul with a batched a, a transposed b; gemm with a bias row, a [1, n]
// bias, and alpha 2, which stays on OpenBLAS) against plain loops, before and after the weights
// are rewritten through parameter().
TEST(ExecutorTest, MatrixProductsWithConstantWeightsMatchPlainLoops) {
  const int64_t m = 6, k = 40, n = 24;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto randomValues = [&](int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = uniform(rng);
    return values;
  };
  struct Case {
    std::string op;
    bool transpose_b;
    Shape bias_shape;  // empty: no bias
    double alpha;
  };
  const std::vector<Case> cases = {{"matmul", false, {}, 1.0}, {"matmul", true, {}, 1.0}, {"gemm", false, {n}, 1.0},
                                   {"gemm", true, {1, n}, 1.0}, {"gemm", false, {n}, 2.0}};
  PlanBuilder b;
  std::vector<int32_t> weights_ids, bias_ids, outputs;
  const int32_t x = b.buffer("x", {DType::kF32, {2, m / 2, k}}, planpb::BUFFER_INPUT);
  const int32_t x2 = b.buffer("x2", {DType::kF32, {m, k}}, planpb::BUFFER_INPUT, x);  // x seen as [m, k]
  for (size_t i = 0; i < cases.size(); ++i) {
    const Shape w_shape = cases[i].transpose_b ? Shape{n, k} : Shape{k, n};
    weights_ids.push_back(b.parameter("w" + std::to_string(i), {DType::kF32, w_shape}, "zeros"));
  }
  for (size_t i = 0; i < cases.size(); ++i)
    bias_ids.push_back(cases[i].bias_shape.empty() ? -1 : b.parameter("b" + std::to_string(i), {DType::kF32, cases[i].bias_shape}, "zeros"));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Shape out_shape = cases[i].op == "matmul" ? Shape{2, m / 2, n} : Shape{m, n};
    outputs.push_back(b.buffer("y" + std::to_string(i), {DType::kF32, out_shape}, planpb::BUFFER_OUTPUT));
  }
  auto* infer = b.program("infer");
  PlanBuilder::input(infer, "x", x);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    AttrMap attrs = {{"transpose_b", int64_t{c.transpose_b}}};
    if (c.op == "gemm") {
      attrs["alpha"] = c.alpha;
      attrs["beta"] = 1.0;
      PlanBuilder::kernel(infer, "gemm", {x2, weights_ids[i], bias_ids[i]}, {outputs[i]}, attrs);
    } else {
      PlanBuilder::kernel(infer, "matmul", {x, weights_ids[i]}, {outputs[i]}, attrs);
    }
    PlanBuilder::output(infer, "y" + std::to_string(i), outputs[i]);
  }
  planpb::Plan plan = b.finish();
  std::vector<std::vector<float>> weights, biases;
  for (size_t i = 0; i < cases.size(); ++i) weights.push_back(randomValues(k * n));
  for (size_t i = 0; i < cases.size(); ++i) biases.push_back(cases[i].bias_shape.empty() ? std::vector<float>{} : randomValues(n));
  int parameter_index = 0;
  for (size_t i = 0; i < cases.size(); ++i) setData<float>(plan, parameter_index++, weights[i]);
  for (size_t i = 0; i < cases.size(); ++i)
    if (!biases[i].empty()) setData<float>(plan, parameter_index++, biases[i]);
  auto device = createCpuDevice();
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  const std::vector<float> inputs = randomValues(m * k);
  std::memcpy(executor->input("infer", "x")->data, inputs.data(), inputs.size() * sizeof(float));
  auto expectProducts = [&](const std::string& when) {
    ASSERT_TRUE(executor->run("infer").isOk());
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto* got = static_cast<const float*>(executor->output("infer", "y" + std::to_string(c))->data);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += inputs[static_cast<size_t>(i * k + p)] *
                   weights[c][static_cast<size_t>(cases[c].transpose_b ? j * k + p : p * n + j)];
          const double expected = cases[c].alpha * sum + (biases[c].empty() ? 0.0 : biases[c][static_cast<size_t>(j)]);
          ASSERT_NEAR(got[i * n + j], expected, 1e-4) << when << ": case " << c << " (" << cases[c].op << ") [" << i << "," << j << "]";
        }
    }
  };
  expectProducts("first run");
  expectProducts("second run");
  for (size_t c = 0; c < cases.size(); ++c) {
    weights[c] = randomValues(k * n);
    std::memcpy(executor->parameter("w" + std::to_string(c))->data, weights[c].data(), weights[c].size() * sizeof(float));
  }
  expectProducts("after parameter() wrote the weights");
}

TEST(ExecutorTest, KernelErrorsNameRankInstructionAndSource) {
  PlanBuilder b;
  int32_t table = b.parameter("table", {DType::kF32, {5, 2}}, "ones");
  int32_t ids = b.buffer("ids", {DType::kI64, {3}}, planpb::BUFFER_INPUT);
  int32_t rows = b.buffer("rows", {DType::kF32, {3, 2}}, planpb::BUFFER_OUTPUT);
  auto* infer = b.program("infer");
  PlanBuilder::input(infer, "ids", ids, 5);
  PlanBuilder::kernel(infer, "gather", {table, ids}, {rows}, {}, "gpt.cir:7:9");
  PlanBuilder::output(infer, "rows", rows);
  auto device = createCpuDevice();
  auto executor = makeExecutor(b.finish(), *device);
  ASSERT_NE(executor, nullptr);
  int64_t bad_ids[3] = {0, 9, 1};
  std::memcpy(executor->input("infer", "ids")->data, bad_ids, sizeof bad_ids);
  Status status = executor->run("infer");
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message().rfind("rank 0: instruction 0 of infer (gather from gpt.cir:7:9): ", 0), 0u)
      << status.message();
}

TEST(ExecutorTest, RejectsCommunicationAndBadPlans) {
  auto device = createCpuDevice();
  planpb::Plan plan = forwardPlan();
  auto* send = plan.mutable_ranks(0)->mutable_programs(0)->add_instructions();
  send->set_kind(planpb::SEND);
  send->add_operands(2);
  send->set_peer(1);
  auto executor = createSingleDeviceExecutor(plan, *device);
  ASSERT_FALSE(executor.hasValue());
  EXPECT_EQ(executor.status().kind(), ErrorKind::kUsage);
  EXPECT_EQ(executor.status().message(),
            "rank 0: instruction 4 of infer (send): needs a communicator: run the plan through a multi-device backend "
            "(cleave run --backend local)");

  planpb::Plan two_ranks = forwardPlan();
  *two_ranks.add_ranks() = two_ranks.ranks(0);
  EXPECT_EQ(createSingleDeviceExecutor(two_ranks, *device).status().kind(), ErrorKind::kUsage);

  planpb::Plan wrong_type = forwardPlan();
  toProto(TensorType{DType::kF32, {2, 5}}, wrong_type.mutable_ranks(0)->mutable_buffers(3)->mutable_type());
  wrong_type.mutable_ranks(0)->set_arena_bytes(wrong_type.ranks(0).arena_bytes() + 64);
  auto mismatch = createSingleDeviceExecutor(wrong_type, *device);
  ASSERT_FALSE(mismatch.hasValue());
  EXPECT_NE(mismatch.status().message().find("instruction 0 of infer (matmul from model.cir:3:5)"), std::string::npos)
      << mismatch.status().message();

  planpb::Plan outside = forwardPlan();
  outside.mutable_ranks(0)->mutable_buffers(3)->set_offset(1 << 20);
  auto out_of_arena = createSingleDeviceExecutor(outside, *device);
  ASSERT_FALSE(out_of_arena.hasValue());
  EXPECT_NE(out_of_arena.status().message().find("does not fit the arena"), std::string::npos);
}

// ---- training ----

// A linear classifier over 784 features: logits = x @ w + b, softmax cross-entropy, SGD with
// momentum updating w, b and their momentum buffers in place, and a step counter.
planpb::Plan classifierPlan(int64_t batch, double lr, const std::string& weight_init = "kaiming_uniform",
                           int64_t classes = 10) {
  PlanBuilder b;
  const TensorType w_type{DType::kF32, {784, classes}}, b_type{DType::kF32, {classes}}, step_type{DType::kI64, {}};
  AttrMap w_args = weight_init == "zeros" ? AttrMap{} : AttrMap{{"a", std::sqrt(5.0)}, {"seed", int64_t{1}}, {"fan_in", int64_t{784}}};
  int32_t w = b.parameter("fc.weight", w_type, weight_init, w_args);
  int32_t bias = b.parameter("fc.bias", b_type, weight_init == "zeros" ? "zeros" : "uniform",
                             weight_init == "zeros" ? AttrMap{} : AttrMap{{"low", -0.0357}, {"high", 0.0357}, {"seed", int64_t{2}}});
  int32_t w_buf = b.parameter("fc.weight.momentum", w_type, "zeros", {}, true);
  int32_t b_buf = b.parameter("fc.bias.momentum", b_type, "zeros", {}, true);
  int32_t step = b.parameter("step", step_type, "zeros", {}, true);

  int32_t x = b.buffer("x", {DType::kF32, {batch, 784}}, planpb::BUFFER_INPUT);
  int32_t labels = b.buffer("labels", {DType::kI64, {batch}}, planpb::BUFFER_INPUT);
  int32_t xw = b.buffer("xw", {DType::kF32, {batch, classes}});
  int32_t logits = b.buffer("logits", {DType::kF32, {batch, classes}}, planpb::BUFFER_OUTPUT);
  int32_t loss = b.buffer("loss", {DType::kF32, {}}, planpb::BUFFER_OUTPUT);
  int32_t one = b.buffer("one", {DType::kF32, {}});
  int32_t dlogits = b.buffer("dlogits", {DType::kF32, {batch, classes}}, planpb::BUFFER_GRADIENT);
  int32_t dw = b.buffer("dw", w_type, planpb::BUFFER_GRADIENT);
  int32_t db = b.buffer("db", b_type, planpb::BUFFER_GRADIENT);
  int32_t one_step = b.buffer("one_step", step_type);
  int32_t w_new = b.buffer("fc.weight.new", w_type, planpb::BUFFER_PARAM, w);
  int32_t b_new = b.buffer("fc.bias.new", b_type, planpb::BUFFER_PARAM, bias);
  int32_t w_buf_new = b.buffer("fc.weight.momentum.new", w_type, planpb::BUFFER_OPTIMIZER_STATE, w_buf);
  int32_t b_buf_new = b.buffer("fc.bias.momentum.new", b_type, planpb::BUFFER_OPTIMIZER_STATE, b_buf);
  int32_t step_new = b.buffer("step.new", step_type, planpb::BUFFER_OPTIMIZER_STATE, step);

  float one_f = 1.0f;
  int64_t one_i = 1;
  auto forward = [&](planpb::Program* program) {
    PlanBuilder::input(program, "x", x);
    PlanBuilder::input(program, "labels", labels, classes);
    PlanBuilder::kernel(program, "matmul", {x, w}, {xw}, {}, "classifier.cir:4:3");
    PlanBuilder::kernel(program, "add", {xw, bias}, {logits}, {}, "classifier.cir:5:3");
  };
  auto* train = b.program("train");
  forward(train);
  PlanBuilder::kernel(train, "softmax_cross_entropy", {logits, labels}, {loss});
  PlanBuilder::kernel(train, "constant", {}, {one}, {{"value", tensorAttr({DType::kF32, {}}, &one_f)}});
  PlanBuilder::kernel(train, "softmax_cross_entropy_grad", {one, logits, labels}, {dlogits});
  PlanBuilder::kernel(train, "matmul", {x, dlogits}, {dw}, {{"transpose_a", int64_t{1}}});
  PlanBuilder::kernel(train, "reduce_sum", {dlogits}, {db}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}});
  AttrMap sgd = {{"lr", lr}, {"momentum", 0.9}};
  PlanBuilder::kernel(train, "sgd_update", {w, dw, step, w_buf}, {w_new, w_buf_new}, sgd);
  PlanBuilder::kernel(train, "sgd_update", {bias, db, step, b_buf}, {b_new, b_buf_new}, sgd);
  PlanBuilder::kernel(train, "constant", {}, {one_step}, {{"value", tensorAttr(step_type, &one_i)}});
  PlanBuilder::kernel(train, "add", {step, one_step}, {step_new});
  PlanBuilder::output(train, "loss", loss);
  auto* eval = b.program("eval");
  forward(eval);
  PlanBuilder::output(eval, "logits", logits);
  auto* infer = b.program("infer");
  PlanBuilder::input(infer, "x", x);
  PlanBuilder::kernel(infer, "matmul", {x, w}, {xw});
  PlanBuilder::kernel(infer, "add", {xw, bias}, {logits});
  PlanBuilder::output(infer, "logits", logits);

  planpb::Plan& plan = b.plan();
  plan.set_global_batch(batch);
  auto* training = plan.mutable_training();
  training->set_loss("softmax_cross_entropy");
  training->set_optimizer("sgd");
  (*training->mutable_optimizer_args())["lr"] = lr;
  training->set_loss_output("loss");
  training->set_logits_output("logits");
  training->set_labels_input("labels");
  return b.finish();
}

// Writes a Fashion-MNIST-shaped folder whose images show their label: pixels with p % 10 == label
// are bright, the rest are noise.
void writeLearnableFashionMnist(const std::string& dir, uint32_t train, uint32_t test) {
  for (auto [prefix, count] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::string images = {0, 0, 8, 3}, labels = {0, 0, 8, 1};
    for (uint32_t dim : {count, 28u, 28u})
      for (int shift = 24; shift >= 0; shift -= 8) images += static_cast<char>((dim >> shift) & 0xff);
    for (int shift = 24; shift >= 0; shift -= 8) labels += static_cast<char>((count >> shift) & 0xff);
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t label = (i * 7 + 3) % 10;
      labels += static_cast<char>(label);
      for (uint32_t p = 0; p < 784; ++p) images += static_cast<char>(p % 10 == label ? 200 : (i * 31 + p * 17) % 64);
    }
    for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"-images-idx3-ubyte.gz", images},
                                      {"-labels-idx1-ubyte.gz", labels}}) {
      gzFile file = gzopen((dir + "/" + prefix + name).c_str(), "wb");
      ASSERT_NE(file, nullptr);
      gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(file);
    }
  }
}

TrainOptions quietOptions(const std::string& data) {
  TrainOptions options;
  options.data = data;
  options.progress = ProgressMode::kNever;
  options.print_summaries = false;
  options.seed = 3;
  return options;
}

std::vector<std::vector<uint8_t>> parameterBytes(const RankExecutor& executor) {
  std::vector<std::vector<uint8_t>> all;
  for (const auto& param : executor.parameters()) {
    const auto* data = static_cast<const uint8_t*>(param.view.data);
    all.emplace_back(data, data + param.view.type.bytes());
  }
  return all;
}

TEST(TrainerTest, LearnsAndRecordsMetricsEvaluationsAndCheckpoints) {
  TempDir dir;
  writeLearnableFashionMnist(dir.path(), 64, 10);
  planpb::Plan plan = classifierPlan(8, 0.05);
  auto device = createCpuDevice();
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  TrainOptions options = quietOptions("fashion-mnist:" + dir.path());
  options.epochs = 3;
  options.eval_data = "fashion-mnist:" + dir.path();
  options.metrics_path = dir.file("metrics.jsonl");
  options.checkpoint_dir = dir.file("ckpt");
  TrainReport report;
  Status status = train(*executor, plan, options, report);
  ASSERT_TRUE(status.isOk()) << status.message();

  EXPECT_EQ(report.steps, 24);  // 3 epochs of 64 / 8 batches
  EXPECT_LT(report.final_loss, 0.5);
  ASSERT_EQ(report.evals.size(), 3u);
  EXPECT_EQ(report.evals[0].epoch, 1);
  EXPECT_EQ(report.evals[2].step, 24);
  ASSERT_TRUE(report.final_eval && report.final_eval->accuracy);
  EXPECT_EQ(report.final_eval->samples, 10);
  EXPECT_EQ(*report.final_eval->accuracy, 1.0);
  EXPECT_GT(report.samples_per_s, 0);
  EXPECT_EQ(report.peak_arena_bytes, executor->arenaBytes());
  EXPECT_EQ(*static_cast<const int64_t*>(executor->parameter("step")->data), 24);

  std::ifstream metrics(options.metrics_path);
  std::string line;
  int lines = 0;
  double first_loss = 0, last_loss = 0;
  while (std::getline(metrics, line)) {
    nlohmann::json record = nlohmann::json::parse(line);
    ++lines;
    EXPECT_EQ(record["step"], lines);
    EXPECT_EQ(record["epoch"], (lines - 1) / 8 + 1);
    EXPECT_GT(record["samples_per_s"].get<double>(), 0);
    EXPECT_GE(record["elapsed_s"].get<double>(), 0);
    EXPECT_EQ(record.contains("eval_accuracy"), lines % 8 == 0) << line;
    (lines == 1 ? first_loss : last_loss) = record["loss"].get<double>();
  }
  EXPECT_EQ(lines, 24);
  EXPECT_LT(last_loss, first_loss);

  // Checkpoints at each epoch's end; the last two kept; `latest` names the newest.
  EXPECT_EQ(report.last_checkpoint, checkpointPath(options.checkpoint_dir, 24));
  EXPECT_TRUE(std::filesystem::exists(checkpointPath(options.checkpoint_dir, 16)));
  EXPECT_FALSE(std::filesystem::exists(checkpointPath(options.checkpoint_dir, 8)));
  std::ifstream latest(options.checkpoint_dir + "/latest");
  std::getline(latest, line);
  EXPECT_EQ(line, "checkpoint-24/manifest.json");
}

TEST(TrainerTest, ResumingGivesBitwiseTheSameParametersAsRunningStraight) {
  TempDir dir;
  writeLearnableFashionMnist(dir.path(), 40, 10);
  planpb::Plan plan = classifierPlan(8, 0.05);
  auto device = createCpuDevice();
  const std::string data = "fashion-mnist:" + dir.path();

  // Straight: 13 steps (2.6 epochs of 5 batches).
  auto straight = makeExecutor(plan, *device);
  ASSERT_NE(straight, nullptr);
  TrainOptions options = quietOptions(data);
  options.steps = 13;
  TrainReport report;
  ASSERT_TRUE(train(*straight, plan, options, report).isOk());

  // Interrupted after 7 steps (mid-epoch), then resumed in a fresh executor up to 13.
  options.checkpoint_dir = dir.file("ckpt");
  options.metrics_path = dir.file("metrics.jsonl");
  options.steps = 7;
  options.checkpoint_every = 3;
  auto first = makeExecutor(plan, *device);
  ASSERT_TRUE(train(*first, plan, options, report).isOk());
  EXPECT_EQ(report.last_checkpoint, checkpointPath(options.checkpoint_dir, 7));

  // The crashed run had logged step 8 after its checkpoint, and half of step 9.
  std::ofstream(options.metrics_path, std::ios::app) << R"({"step": 8, "loss": 1.0})" << "\n" << R"({"step": 9, "lo)";

  auto resumed = makeExecutor(plan, *device);
  options.steps = 13;
  options.resume = true;
  options.seed = 999;  // ignored: the checkpoint's seed decides the data order
  Status status = train(*resumed, plan, options, report);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(report.start_step, 7);
  EXPECT_EQ(report.resumed_from, checkpointPath(options.checkpoint_dir, 7));
  EXPECT_EQ(report.steps, 13);
  EXPECT_EQ(parameterBytes(*resumed), parameterBytes(*straight));

  // The metrics file holds the whole run, each of steps 1..13 once.
  std::ifstream metrics(options.metrics_path);
  std::string line;
  int64_t expected_step = 0;
  while (std::getline(metrics, line)) EXPECT_EQ(nlohmann::json::parse(line)["step"], ++expected_step);
  EXPECT_EQ(expected_step, 13);
}

TEST(CheckpointTest, RefusesACheckpointOfAnotherPlan) {
  TempDir dir;
  auto device = createCpuDevice();
  planpb::Plan plan = classifierPlan(4, 0.1);
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  auto saved = saveCheckpoint(dir.path(), *executor, CheckpointState{5, {1, 2}, 77});
  ASSERT_TRUE(saved.hasValue()) << saved.status().message();
  EXPECT_EQ(*latestCheckpointPath(dir.path()), *saved);

  auto same = makeExecutor(plan, *device);
  auto state = loadLatestCheckpoint(dir.path(), *same);
  ASSERT_TRUE(state.hasValue()) << state.status().message();
  EXPECT_EQ(state->step, 5);
  EXPECT_EQ(state->position, (DataPosition{1, 2}));
  EXPECT_EQ(state->seed, 77u);
  EXPECT_EQ(parameterBytes(*same), parameterBytes(*executor));

  // Another plan: the forward plan has different tensors.
  auto other = makeExecutor(forwardPlan(), *device);
  auto refused = loadLatestCheckpoint(dir.path(), *other);
  ASSERT_FALSE(refused.hasValue());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(refused.status().message().find("has no tensor 'b' that the plan needs"), std::string::npos) << refused.status().message();

  // Same names, another shape; nothing is loaded.
  auto eleven = makeExecutor(classifierPlan(4, 0.1, "zeros", 11), *device);
  ASSERT_NE(eleven, nullptr);
  auto wrong_shape = loadLatestCheckpoint(dir.path(), *eleven);
  ASSERT_FALSE(wrong_shape.hasValue());
  EXPECT_NE(wrong_shape.status().message().find("tensor 'fc.bias' is f32[10], the plan has f32[11]"),
            std::string::npos)
      << wrong_shape.status().message();
  const auto* untouched = static_cast<const float*>(eleven->parameter("fc.weight")->data);
  EXPECT_EQ(untouched[0], 0.0f);

  std::ofstream(dir.path() + "/latest") << "../../etc/passwd\n";
  EXPECT_NE(loadLatestCheckpoint(dir.path(), *same).status().message().find("does not name a checkpoint"),
            std::string::npos);
}

// The classifier plan without its optimizer state, as an inference plan of the model holds it.
planpb::Plan withoutOptimizerState(planpb::Plan plan) {
  planpb::RankPlan& rank = *plan.mutable_ranks(0);
  std::set<int32_t> state;
  for (const auto& buffer : rank.buffers())
    if (buffer.kind() == planpb::BUFFER_OPTIMIZER_STATE) state.insert(buffer.id());
  auto* params = rank.mutable_parameters();
  params->erase(std::remove_if(params->begin(), params->end(),
                               [&](const planpb::Parameter& param) { return state.count(param.buffer()) > 0; }),
                params->end());
  return plan;
}

TEST(CheckpointTest, AnInferencePlanIgnoresTheOptimizerStateAndATrainingPlanDoesNot) {
  TempDir dir;
  auto device = createCpuDevice();
  planpb::Plan plan = classifierPlan(4, 0.1);
  auto trained = makeExecutor(plan, *device);
  ASSERT_TRUE(trained->initializeParameters().isOk());
  ASSERT_TRUE(saveCheckpoint(dir.file("training"), *trained, CheckpointState{5, {0, 5}, 1}).hasValue());

  auto inference = makeExecutor(withoutOptimizerState(plan), *device);
  ASSERT_NE(inference, nullptr);
  auto loaded = loadLatestCheckpoint(dir.file("training"), *inference);
  ASSERT_TRUE(loaded.hasValue()) << loaded.status().message();
  std::vector<std::vector<uint8_t>> weights = parameterBytes(*trained);
  weights.resize(2);  // fc.weight, fc.bias
  EXPECT_EQ(parameterBytes(*inference), weights);

  // The other way round the training plan misses its momentum.
  ASSERT_TRUE(saveCheckpoint(dir.file("inference"), *inference, CheckpointState{5, {0, 5}, 1}).hasValue());
  auto refused = loadLatestCheckpoint(dir.file("inference"), *makeExecutor(plan, *device));
  ASSERT_FALSE(refused.hasValue());
  EXPECT_NE(refused.status().message().find("'fc.bias.momentum' that the plan needs (f32[10]): it was saved with "
                                            "another optimizer"),
            std::string::npos)
      << refused.status().message();
}

TEST(CheckpointTest, AChangedByteFailsItsChecksum) {
  TempDir dir;
  auto device = createCpuDevice();
  planpb::Plan plan = classifierPlan(4, 0.1);
  auto executor = makeExecutor(plan, *device);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  auto saved = saveCheckpoint(dir.path(), *executor, CheckpointState{2, {0, 2}, 1});
  ASSERT_TRUE(saved.hasValue());
  const std::string shard = *saved + "/rank-0.safetensors";
  std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-3, std::ios::end);
  char byte = 0;
  file.read(&byte, 1);
  file.seekp(-3, std::ios::end);
  byte ^= 0x10;
  file.write(&byte, 1);
  file.close();
  auto loaded = loadLatestCheckpoint(dir.path(), *makeExecutor(plan, *device));
  ASSERT_FALSE(loaded.hasValue());
  EXPECT_EQ(loaded.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(loaded.status().message().find("checkpoint file '" + shard + "': tensor '"), std::string::npos)
      << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("is corrupt (CRC-32"), std::string::npos);
}

TEST(CheckpointTest, PruningKeepsTheNewestCompleteOnesAndRemovesCrashedSaves) {
  TempDir dir;
  auto device = createCpuDevice();
  auto executor = makeExecutor(classifierPlan(4, 0.1), *device);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  for (int64_t step : {3, 5}) ASSERT_TRUE(saveCheckpoint(dir.path(), *executor, CheckpointState{step, {}, 0}).hasValue());
  // A crashed save of step 9 (no manifest, a temporary file) and a crashed write of `latest`.
  std::filesystem::create_directories(dir.file("checkpoint-9"));
  std::ofstream(dir.file("checkpoint-9/.tmp-rank-0.safetensors-1-0")) << "partial";
  std::ofstream(dir.file(".tmp-latest-1-1")) << "checkpoint-9";
  ASSERT_TRUE(saveCheckpoint(dir.path(), *executor, CheckpointState{7, {}, 0}).hasValue());
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"checkpoint-5", "checkpoint-7", "latest"}));
}

TEST(CheckpointTest, LoadsTheSingleFileCheckpointsOfOlderCleaves) {
  TempDir dir;
  auto device = createCpuDevice();
  planpb::Plan plan = classifierPlan(4, 0.1);
  auto executor = makeExecutor(plan, *device);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  std::vector<SafetensorsEntry> entries;
  for (const ParameterTensor& param : executor->parameters())
    entries.push_back(SafetensorsEntry{param.name, param.view.type, param.view.data});
  ASSERT_TRUE(writeSafetensors(dir.file("checkpoint-4.safetensors"), entries,
                               {{"format", "cleave-checkpoint-1"}, {"step", "4"}, {"epoch", "0"}, {"batch", "4"},
                                {"seed", "3"}, {"fingerprint", "0"}})
                  .isOk());
  std::ofstream(dir.file("latest")) << "checkpoint-4.safetensors\n";
  auto resumed = makeExecutor(plan, *device);
  auto state = loadLatestCheckpoint(dir.path(), *resumed);
  ASSERT_TRUE(state.hasValue()) << state.status().message();
  EXPECT_EQ(state->step, 4);
  EXPECT_EQ(state->seed, 3u);
  EXPECT_EQ(parameterBytes(*resumed), parameterBytes(*executor));
}

TEST(TrainerTest, EvaluationCountsOnlyRealRowsOfThePaddedBatch) {
  TempDir dir;
  writeLearnableFashionMnist(dir.path(), 8, 5);  // test labels (7i+3)%10: 3, 0, 7, 4, 1
  planpb::Plan plan = classifierPlan(4, 0.1, "zeros");
  auto device = createCpuDevice();
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  auto inputs = executor->inputs("eval");
  ASSERT_TRUE(inputs.hasValue());
  auto source = openDataSource("fashion-mnist:" + dir.path(), *inputs, {DataSplit::kEval, 0, "labels"});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  // All-zero weights: every logit is 0, argmax is class 0, the loss is ln 10 everywhere.
  auto result = evaluate(*executor, plan, **source);
  ASSERT_TRUE(result.hasValue()) << result.status().message();
  EXPECT_EQ(result->samples, 5);
  EXPECT_DOUBLE_EQ(*result->accuracy, 1.0 / 5.0);
  EXPECT_NEAR(*result->loss, std::log(10.0), 1e-12);
}

TEST(TrainerTest, StopsOnANonFiniteLoss) {
  TempDir dir;
  writeLearnableFashionMnist(dir.path(), 16, 4);
  planpb::Plan plan = classifierPlan(4, 1e38);
  auto device = createCpuDevice();
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  TrainOptions options = quietOptions("fashion-mnist:" + dir.path());
  options.steps = 20;
  TrainReport report;
  Status status = train(*executor, plan, options, report);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kRuntime);
  EXPECT_EQ(status.message().rfind("step " + std::to_string(report.steps) + ": the loss is ", 0), 0u) << status.message();
  EXPECT_LT(report.steps, 20);
}

TEST(TrainerTest, ChecksItsOptions) {
  auto device = createCpuDevice();
  planpb::Plan plan = classifierPlan(4, 0.1);
  auto executor = makeExecutor(plan, *device);
  ASSERT_NE(executor, nullptr);
  TrainReport report;
  TrainOptions options = quietOptions("synthetic");
  EXPECT_EQ(train(*executor, plan, options, report).kind(), ErrorKind::kUsage);  // no steps or epochs
  options.epochs = 1;
  EXPECT_NE(train(*executor, plan, options, report).message().find("endless"), std::string::npos);
  options.epochs = 0;
  options.steps = 3;
  options.resume = true;
  EXPECT_EQ(train(*executor, plan, options, report).message(), "--resume needs --checkpoint-dir");
  options.resume = false;
  Status ok = train(*executor, plan, options, report);
  EXPECT_TRUE(ok.isOk()) << ok.message();
  EXPECT_TRUE(std::isfinite(report.final_loss));
  planpb::Plan forward = forwardPlan();
  auto forward_executor = makeExecutor(forward, *device);
  EXPECT_EQ(train(*forward_executor, forward, options, report).kind(), ErrorKind::kUsage);
}

// ---- inference ----

TEST(InferenceTest, ReadsInputsAndWritesOutputs) {
  TempDir dir;
  auto device = createCpuDevice();
  auto executor = makeExecutor(forwardPlan(), *device);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->initializeParameters().isOk());
  float x[6] = {1, 2, 3, -1, 0, 2};
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), {DType::kF32, {2, 3}}, x).isOk());
  auto written = runInference(*executor, dir.path(), dir.file("out"));
  ASSERT_TRUE(written.hasValue()) << written.status().message();
  EXPECT_EQ(*written, std::vector<std::string>{dir.file("out/out.npy")});
  auto out = readNpy(dir.file("out/out.npy"));
  ASSERT_TRUE(out.hasValue());
  EXPECT_EQ(out->type, (TensorType{DType::kF32, {2, 4}}));
  EXPECT_EQ(reinterpret_cast<const float*>(out->data.data())[0], 4.5f);

  ASSERT_TRUE(writeNpy(dir.file("x.npy"), {DType::kF32, {3, 2}}, x).isOk());
  auto wrong = runInference(*executor, dir.path(), dir.file("out"));
  ASSERT_FALSE(wrong.hasValue());
  EXPECT_EQ(wrong.status().message(),
            "input 'x': '" + dir.file("x.npy") + "' holds f32[3,2], expected f32[2,3]");
  auto missing = runInference(*executor, dir.file("nowhere"), dir.file("out"));
  EXPECT_NE(missing.status().message().find("missing '" + dir.file("nowhere/x.npy") + "' for input 'x' (f32[2,3])"),
            std::string::npos);
}

}  // namespace
}  // namespace cleave::runtime
