// Tests of multi-rank runs on small hand-built plans: tensor- and data-parallel programs against one
// device, split parameters, checkpoints of whole tensors, sends, and failures that stop every rank.
#include "runtime/exec/rank_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
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
  TempDir() : test::TempDir("cleave-rank-group") {}
};

// Builds one rank of a plan: buffers get their own 64-byte aligned bytes (aliases share their root's).
class RankBuilder {
 public:
  explicit RankBuilder(planpb::RankPlan* rank) : rank_(rank) {}

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

  // A persistent tensor with its own buffer; `full_shape` / `shard_offset` make it a block.
  int32_t parameter(const std::string& name, const TensorType& type, const std::string& init, const AttrMap& args = {},
                    bool optimizer_state = false, const Shape& full_shape = {}, const Shape& shard_offset = {}) {
    int32_t id = buffer(name, type, optimizer_state ? planpb::BUFFER_OPTIMIZER_STATE : planpb::BUFFER_PARAM);
    auto* param = rank_->add_parameters();
    param->set_name(name);
    param->set_buffer(id);
    param->set_trainable(!optimizer_state);
    param->mutable_init()->set_kind(init);
    for (const auto& [key, value] : args) toProto(value, &(*param->mutable_init()->mutable_args())[key]);
    for (int64_t d : full_shape) param->add_full_shape(d);
    for (int64_t d : shard_offset) param->add_shard_offset(d);
    return id;
  }

  planpb::Program* program(const std::string& name) {
    auto* program = rank_->add_programs();
    program->set_name(name);
    return program;
  }

  void finish() {
    rank_->set_arena_bytes(next_offset_);
    rank_->set_persistent_bytes(persistent_end_);
    for (auto& program : *rank_->mutable_programs()) program.set_peak_bytes(next_offset_);
  }

 private:
  planpb::RankPlan* rank_;
  int64_t next_offset_ = 0;
  int64_t persistent_end_ = 0;
};

planpb::Plan emptyPlan(int dp, int tp) {
  planpb::Plan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_producer("rank_group_test");
  plan.set_devices(dp * tp);
  auto* strategy = plan.mutable_strategy();
  strategy->set_dp(dp);
  strategy->set_tp(tp);
  strategy->set_pp(1);
  strategy->set_microbatches(1);
  for (int rank = 0; rank < dp * tp; ++rank) {
    auto* rank_plan = plan.add_ranks();
    rank_plan->set_rank(rank);
    rank_plan->set_dp_index(rank / tp);
    rank_plan->set_tp_index(rank % tp);
  }
  return plan;
}

planpb::Instruction* kernel(planpb::Program* program, const std::string& op, std::vector<int32_t> operands,
                            std::vector<int32_t> results, const AttrMap& attrs = {}) {
  auto* inst = program->add_instructions();
  inst->set_kind(planpb::KERNEL);
  inst->set_op(op);
  for (int32_t id : operands) inst->add_operands(id);
  for (int32_t id : results) inst->add_results(id);
  for (const auto& [key, value] : attrs) toProto(value, &(*inst->mutable_attrs())[key]);
  return inst;
}

planpb::Instruction* communicate(planpb::Program* program, planpb::InstructionKind kind, std::vector<int32_t> operands,
                                 std::vector<int32_t> results, std::vector<int> group, const AttrMap& attrs = {}) {
  planpb::Instruction* inst = kernel(program, "", std::move(operands), std::move(results), attrs);
  inst->set_kind(kind);
  inst->set_stream(1);
  for (int rank : group) inst->add_group(rank);
  return inst;
}

void input(planpb::Program* program, const std::string& name, int32_t buffer, int64_t batch_offset = 0,
           int64_t value_limit = 0) {
  auto* named = program->add_inputs();
  named->set_name(name);
  named->set_buffer(buffer);
  named->set_batch_offset(batch_offset);
  named->set_value_limit(value_limit);
}

void output(planpb::Program* program, const std::string& name, int32_t buffer, int64_t batch_offset = 0) {
  auto* named = program->add_outputs();
  named->set_name(name);
  named->set_buffer(buffer);
  named->set_batch_offset(batch_offset);
}

std::unique_ptr<RankGroup> makeGroup(const planpb::Plan& plan, double timeout_seconds = 60) {
  Status valid = validatePlan(plan);
  EXPECT_TRUE(valid.isOk()) << valid.message();
  auto group = RankGroup::create(plan, RankGroupOptions{2, timeout_seconds});
  EXPECT_TRUE(group.hasValue()) << group.status().message();
  return group.hasValue() ? std::move(*group) : nullptr;
}

template <class T>
std::vector<T> tensorValues(const TensorView& view) {
  const auto* data = static_cast<const T*>(view.data);
  return std::vector<T>(data, data + view.type.numel());
}

template <class T>
std::vector<T> hostValues(const HostTensor& tensor) {
  const auto* data = reinterpret_cast<const T*>(tensor.bytes.data());
  return std::vector<T>(data, data + tensor.type.numel());
}

// ---- tensor parallel: a row-split matmul and an all-reduce ----

const AttrMap kWeightInit = {{"a", 1.0}, {"seed", int64_t{5}}};

// infer: y = x @ w with w f32[6,3]; on `tp` ranks each holds rows [3r, 3r+3) of w (a block of the
// whole tensor), multiplies its columns of x by it and all-reduces the partial products.
planpb::Plan rowSplitMatmulPlan(int tp) {
  planpb::Plan plan = emptyPlan(1, tp);
  const int64_t k = 6 / tp;
  for (int r = 0; r < tp; ++r) {
    RankBuilder b(plan.mutable_ranks(r));
    int32_t w =
        tp == 1 ? b.parameter("w", {DType::kF32, {6, 3}}, "kaiming_uniform", kWeightInit)
                : b.parameter("w", {DType::kF32, {k, 3}}, "kaiming_uniform", kWeightInit, false, {6, 3}, {r * k, 0});
    int32_t x = b.buffer("x", {DType::kF32, {4, 6}}, planpb::BUFFER_INPUT);
    int32_t y = b.buffer("y", {DType::kF32, {4, 3}}, planpb::BUFFER_OUTPUT);
    auto* infer = b.program("infer");
    input(infer, "x", x);
    if (tp == 1) {
      kernel(infer, "matmul", {x, w}, {y});
    } else {
      int32_t columns = b.buffer("x.columns", {DType::kF32, {4, k}});
      kernel(infer, "slice", {x}, {columns},
             {{"starts", std::vector<int64_t>{r * k}},
              {"ends", std::vector<int64_t>{r * k + k}},
              {"axes", std::vector<int64_t>{1}}});
      kernel(infer, "matmul", {columns, w}, {y});
      std::vector<int> group;
      for (int q = 0; q < tp; ++q) group.push_back(q);
      communicate(infer, planpb::ALL_REDUCE, {y}, {y}, group)->set_reduce_op("sum");
    }
    output(infer, "y", y);
    b.finish();
  }
  return plan;
}

// Runs "infer" on x = 0.1 * (i - 11) and returns y, assembled.
std::vector<float> inferRowSplit(RankGroup& group) {
  auto batch = GlobalBatch::create(group, "infer");
  EXPECT_TRUE(batch.hasValue()) << batch.status().message();
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = 0.1f * static_cast<float>(i - 11);
  EXPECT_EQ((*batch)->inputs()[0].view.type, (TensorType{DType::kF32, {4, 6}}));
  EXPECT_TRUE((*batch)->write(0, x.data()).isOk());
  EXPECT_TRUE((*batch)->scatter().isOk());
  Status ran = group.run("infer");
  EXPECT_TRUE(ran.isOk()) << ran.message();
  auto y = gatherOutput(group, "infer", "y");
  EXPECT_TRUE(y.hasValue()) << y.status().message();
  return y.hasValue() ? hostValues<float>(*y) : std::vector<float>{};
}

TEST(RankGroupTest, RowSplitMatmulWithAllReduceMatchesOneDevice) {
  auto one = makeGroup(rowSplitMatmulPlan(1));
  auto two = makeGroup(rowSplitMatmulPlan(2));
  auto three = makeGroup(rowSplitMatmulPlan(3));
  ASSERT_TRUE(one && two && three);
  ASSERT_TRUE(one->initializeParameters().isOk());
  ASSERT_TRUE(two->initializeParameters().isOk());
  ASSERT_TRUE(three->initializeParameters().isOk());

  // Each block holds bitwise the rows of the one-device weight.
  std::vector<float> whole = tensorValues<float>(one->executor(0).parameters()[0].view);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> block = tensorValues<float>(two->executor(r).parameters()[0].view);
    ASSERT_EQ(block.size(), 9u);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(block[i], whole[r * 9 + i]) << "rank " << r << " element " << i;
  }

  std::vector<float> expected = inferRowSplit(*one);
  for (RankGroup* group : {two.get(), three.get()}) {
    std::vector<float> got = inferRowSplit(*group);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << i;
    // The replicas agree bitwise.
    std::vector<float> rank0 = tensorValues<float>(*group->executor(0).output("infer", "y"));
    std::vector<float> rank1 = tensorValues<float>(*group->executor(1).output("infer", "y"));
    EXPECT_EQ(std::memcmp(rank0.data(), rank1.data(), rank0.size() * sizeof(float)), 0);
  }
}

TEST(RankGroupTest, CheckpointsHoldWholeTensorsThatAnySplitResumes) {
  TempDir dir;
  auto one = makeGroup(rowSplitMatmulPlan(1));
  auto two = makeGroup(rowSplitMatmulPlan(2));
  ASSERT_TRUE(one && two);
  ASSERT_TRUE(one->initializeParameters().isOk());
  ASSERT_TRUE(two->initializeParameters().isOk());

  // Both hold the same whole tensor; the two-rank one as two blocks, one per rank's shard.
  auto saved_one = saveCheckpoint(dir.file("one"), *one, CheckpointState{3, {0, 1}, 9});
  auto saved_two = saveCheckpoint(dir.file("two"), *two, CheckpointState{3, {0, 1}, 9});
  ASSERT_TRUE(saved_one.hasValue()) << saved_one.status().message();
  ASSERT_TRUE(saved_two.hasValue()) << saved_two.status().message();
  EXPECT_TRUE(std::filesystem::exists(*saved_two + "/rank-1.safetensors"));
  auto whole_one = readLatestCheckpoint(dir.file("one"));
  auto whole_two = readLatestCheckpoint(dir.file("two"));
  ASSERT_TRUE(whole_one.hasValue() && whole_two.hasValue()) << whole_two.status().message();
  ASSERT_EQ(whole_two->tensors.size(), 1u);
  EXPECT_EQ(whole_two->tensors[0].type, (TensorType{DType::kF32, {6, 3}}));
  EXPECT_EQ(whole_one->tensors[0].data, whole_two->tensors[0].data);

  // A three-rank plan resumes from it: its blocks are cut from the whole tensor.
  auto three = makeGroup(rowSplitMatmulPlan(3));
  ASSERT_TRUE(three);
  auto state = loadLatestCheckpoint(dir.file("two"), *three);
  ASSERT_TRUE(state.hasValue()) << state.status().message();
  EXPECT_EQ(state->step, 3);
  std::vector<float> whole = tensorValues<float>(one->executor(0).parameters()[0].view);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> block = tensorValues<float>(three->executor(r).parameters()[0].view);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(block[i], whole[r * 6 + i]) << "rank " << r << " element " << i;
  }
}

// ---- data parallel training ----

constexpr int64_t kFeatures = 8, kClasses = 4;

// A linear classifier trained with softmax cross-entropy and SGD with momentum. On `dp` ranks each
// takes rows [r B/dp, (r+1) B/dp) of the batch, its loss and gradients are all-reduced (mean; the
// gradients as one bucket) before the update, so every rank holds the one-device weights.
planpb::Plan classifierPlan(int dp, int64_t batch) {
  planpb::Plan plan = emptyPlan(dp, 1);
  const int64_t rows = batch / dp;
  std::vector<int> group;
  for (int q = 0; q < dp; ++q) group.push_back(q);
  for (int r = 0; r < dp; ++r) {
    RankBuilder b(plan.mutable_ranks(r));
    const TensorType w_type{DType::kF32, {kFeatures, kClasses}}, b_type{DType::kF32, {kClasses}};
    const TensorType step_type{DType::kI64, {}};
    int32_t w = b.parameter("fc.weight", w_type, "kaiming_uniform", {{"a", std::sqrt(5.0)}, {"seed", int64_t{1}}});
    int32_t bias = b.parameter("fc.bias", b_type, "uniform", {{"low", -0.3}, {"high", 0.3}, {"seed", int64_t{2}}});
    int32_t w_buf = b.parameter("fc.weight.momentum", w_type, "zeros", {}, true);
    int32_t b_buf = b.parameter("fc.bias.momentum", b_type, "zeros", {}, true);
    int32_t step = b.parameter("step", step_type, "zeros", {}, true);
    int32_t x = b.buffer("x", {DType::kF32, {rows, kFeatures}}, planpb::BUFFER_INPUT);
    int32_t labels = b.buffer("labels", {DType::kI64, {rows}}, planpb::BUFFER_INPUT);
    int32_t xw = b.buffer("xw", {DType::kF32, {rows, kClasses}});
    int32_t logits = b.buffer("logits", {DType::kF32, {rows, kClasses}}, planpb::BUFFER_OUTPUT);
    int32_t loss = b.buffer("loss", {DType::kF32, {}}, planpb::BUFFER_OUTPUT);
    int32_t one = b.buffer("one", {DType::kF32, {}});
    int32_t dlogits = b.buffer("dlogits", {DType::kF32, {rows, kClasses}}, planpb::BUFFER_GRADIENT);
    int32_t dw = b.buffer("dw", w_type, planpb::BUFFER_GRADIENT);
    int32_t db = b.buffer("db", b_type, planpb::BUFFER_GRADIENT);
    int32_t one_step = b.buffer("one_step", step_type);
    int32_t w_new = b.buffer("fc.weight.new", w_type, planpb::BUFFER_PARAM, w);
    int32_t b_new = b.buffer("fc.bias.new", b_type, planpb::BUFFER_PARAM, bias);
    int32_t w_buf_new = b.buffer("fc.weight.momentum.new", w_type, planpb::BUFFER_OPTIMIZER_STATE, w_buf);
    int32_t b_buf_new = b.buffer("fc.bias.momentum.new", b_type, planpb::BUFFER_OPTIMIZER_STATE, b_buf);
    int32_t step_new = b.buffer("step.new", step_type, planpb::BUFFER_OPTIMIZER_STATE, step);

    auto forward = [&](planpb::Program* program) {
      input(program, "x", x, r * rows);
      input(program, "labels", labels, r * rows, kClasses);
      kernel(program, "matmul", {x, w}, {xw});
      kernel(program, "add", {xw, bias}, {logits});
    };
    float one_f = 1.0f;
    int64_t one_i = 1;
    auto scalar = [](const TensorType& type, const void* data) {
      auto tensor = std::make_shared<TensorData>();
      tensor->type = type;
      tensor->bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + type.bytes());
      return Attribute{std::shared_ptr<const TensorData>(std::move(tensor))};
    };
    auto* train = b.program("train");
    forward(train);
    kernel(train, "softmax_cross_entropy", {logits, labels}, {loss});
    if (dp > 1) {
      auto* reduce_loss = communicate(train, planpb::ALL_REDUCE, {loss}, {loss}, group);
      reduce_loss->set_reduce_op("mean");
      reduce_loss->set_stream(0);  // on the compute stream: it runs in place, after the queued transfers
    }
    kernel(train, "constant", {}, {one}, {{"value", scalar({DType::kF32, {}}, &one_f)}});
    kernel(train, "softmax_cross_entropy_grad", {one, logits, labels}, {dlogits});
    kernel(train, "matmul", {x, dlogits}, {dw}, {{"transpose_a", int64_t{1}}});
    kernel(train, "reduce_sum", {dlogits}, {db}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}});
    if (dp > 1) communicate(train, planpb::ALL_REDUCE, {dw, db}, {dw, db}, group)->set_reduce_op("mean");
    AttrMap sgd = {{"lr", 0.2}, {"momentum", 0.9}};
    kernel(train, "sgd_update", {w, dw, step, w_buf}, {w_new, w_buf_new}, sgd);
    kernel(train, "sgd_update", {bias, db, step, b_buf}, {b_new, b_buf_new}, sgd);
    kernel(train, "constant", {}, {one_step}, {{"value", scalar(step_type, &one_i)}});
    kernel(train, "add", {step, one_step}, {step_new});
    output(train, "loss", loss);
    auto* eval = b.program("eval");
    forward(eval);
    output(eval, "logits", logits, r * rows);
    b.finish();
  }
  plan.set_global_batch(batch);
  auto* training = plan.mutable_training();
  training->set_loss("softmax_cross_entropy");
  training->set_optimizer("sgd");
  training->set_loss_output("loss");
  training->set_logits_output("logits");
  training->set_labels_input("labels");
  return plan;
}

// 20 rows of features whose label is the index of their largest of the first four features.
void writeClassifierData(const std::string& dir) {
  std::vector<float> x(20 * kFeatures);
  std::vector<int64_t> labels(20);
  for (int i = 0; i < 20; ++i) {
    for (int f = 0; f < kFeatures; ++f) x[i * kFeatures + f] = std::sin(0.7f * static_cast<float>(i * kFeatures + f));
    labels[i] =
        std::max_element(x.begin() + i * kFeatures, x.begin() + i * kFeatures + kClasses) - (x.begin() + i * kFeatures);
  }
  ASSERT_TRUE(writeNpy(dir + "/x.npy", {DType::kF32, {20, kFeatures}}, x.data()).isOk());
  ASSERT_TRUE(writeNpy(dir + "/labels.npy", {DType::kI64, {20}}, labels.data()).isOk());
}

struct TrainedRun {
  TrainReport report;
  std::vector<std::vector<float>> weights;  // fc.weight, fc.bias of every rank
};

TrainedRun trainClassifier(int dp, const std::string& data_dir, const std::string& checkpoint_dir = "") {
  TrainedRun run;
  planpb::Plan plan = classifierPlan(dp, 4);
  auto group = makeGroup(plan);
  if (!group) return run;
  TrainOptions options;
  options.data = "npy:" + data_dir;
  options.eval_data = "npy:" + data_dir;
  options.steps = 7;
  options.seed = 11;
  options.progress = ProgressMode::kNever;
  options.print_summaries = false;
  options.checkpoint_dir = checkpoint_dir;
  Status status = train(*group, plan, options, run.report);
  EXPECT_TRUE(status.isOk()) << status.message();
  for (int r = 0; r < dp; ++r)
    for (const char* name : {"fc.weight", "fc.bias"})
      run.weights.push_back(tensorValues<float>(*group->executor(r).parameter(name)));
  return run;
}

TEST(RankGroupTest, DataParallelTrainingMatchesOneDevice) {
  TempDir dir;
  writeClassifierData(dir.path());
  TrainedRun one = trainClassifier(1, dir.path(), dir.file("one"));
  TrainedRun two = trainClassifier(2, dir.path(), dir.file("two"));
  TrainedRun four = trainClassifier(4, dir.path());
  for (const TrainedRun* run : {&two, &four}) {
    EXPECT_EQ(run->report.steps, 7);
    EXPECT_NEAR(run->report.final_loss, one.report.final_loss, 1e-5 * std::abs(one.report.final_loss));
    ASSERT_TRUE(run->report.final_eval && one.report.final_eval);
    EXPECT_EQ(run->report.final_eval->samples, 20);
    EXPECT_EQ(*run->report.final_eval->accuracy, *one.report.final_eval->accuracy);
    EXPECT_NEAR(*run->report.final_eval->loss, *one.report.final_eval->loss, 1e-5);
    // Every rank holds the one-device weights; the ranks agree bitwise.
    for (size_t i = 0; i < run->weights.size(); ++i) {
      const std::vector<float>& expected = one.weights[i % 2];
      ASSERT_EQ(run->weights[i].size(), expected.size());
      for (size_t j = 0; j < expected.size(); ++j)
        EXPECT_NEAR(run->weights[i][j], expected[j], 1e-5 * std::max(1.0f, std::abs(expected[j])));
      EXPECT_EQ(run->weights[i], run->weights[i % 2]);
    }
  }
  EXPECT_LT(one.report.final_loss, 1.2);  // it learned something
  ASSERT_EQ(two.report.rank_arena_bytes.size(), 2u);
  EXPECT_EQ(two.report.peak_arena_bytes, two.report.rank_arena_bytes[0]);

  // The checkpoints hold the same tensors, so the one-device run resumes into the two-rank plan.
  auto one_file = readLatestCheckpoint(dir.file("one"));
  auto two_file = readLatestCheckpoint(dir.file("two"));
  ASSERT_TRUE(one_file.hasValue() && two_file.hasValue());
  ASSERT_EQ(one_file->tensors.size(), two_file->tensors.size());
  EXPECT_EQ(one_file->state.step, 7);
  planpb::Plan plan = classifierPlan(2, 4);
  auto resumed = makeGroup(plan);
  ASSERT_TRUE(resumed);
  auto state = loadLatestCheckpoint(dir.file("one"), *resumed);
  ASSERT_TRUE(state.hasValue()) << state.status().message();
  EXPECT_EQ(tensorValues<float>(*resumed->executor(1).parameter("fc.bias")), one.weights[1]);
}

// ---- sends, gathers, failures ----

TEST(RankGroupTest, ExecutesSendRecvAndAllGatherInstructions) {
  // Rank r takes rows [2r, 2r+2) of x f32[4,2]; rank 0 sends its rows to rank 1; both gather
  // their rows side by side (dim 1).
  planpb::Plan plan = emptyPlan(2, 1);
  for (int r = 0; r < 2; ++r) {
    RankBuilder b(plan.mutable_ranks(r));
    int32_t x = b.buffer("x", {DType::kF32, {2, 2}}, planpb::BUFFER_INPUT);
    int32_t gathered = b.buffer("gathered", {DType::kF32, {2, 4}}, planpb::BUFFER_OUTPUT);
    auto* infer = b.program("infer");
    input(infer, "x", x, 2 * r);
    if (r == 0) {
      auto* send = communicate(infer, planpb::SEND, {x}, {}, {});
      send->set_peer(1);
      send->set_tag(7);
    } else {
      int32_t received = b.buffer("received", {DType::kF32, {2, 2}}, planpb::BUFFER_OUTPUT);
      auto* recv = communicate(infer, planpb::RECV, {}, {received}, {});
      recv->set_peer(0);
      recv->set_tag(7);
      output(infer, "received", received);
    }
    communicate(infer, planpb::ALL_GATHER, {x}, {gathered}, {0, 1}, {{"dim", int64_t{-1}}});
    output(infer, "gathered", gathered, 2 * r);
    b.finish();
  }
  auto group = makeGroup(plan);
  ASSERT_TRUE(group);
  TempDir dir;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), {DType::kF32, {4, 2}}, x.data()).isOk());
  auto written = runInference(*group, dir.path(), dir.file("out"));
  ASSERT_TRUE(written.hasValue()) << written.status().message();
  auto gathered = readNpy(dir.file("out/gathered.npy"));
  auto received = readNpy(dir.file("out/received.npy"));
  ASSERT_TRUE(gathered.hasValue() && received.hasValue());
  EXPECT_EQ(gathered->type, (TensorType{DType::kF32, {4, 4}}));
  const auto* g = reinterpret_cast<const float*>(gathered->data.data());
  EXPECT_EQ(std::vector<float>(g, g + 16), (std::vector<float>{1, 2, 5, 6, 3, 4, 7, 8, 1, 2, 5, 6, 3, 4, 7, 8}));
  const auto* r = reinterpret_cast<const float*>(received->data.data());
  EXPECT_EQ(std::vector<float>(r, r + 4), (std::vector<float>{1, 2, 3, 4}));
}

TEST(RankGroupTest, KernelsWaitForPendingTransfersOfTheirBytes) {
  // Each rank all-reduces x into y on the communication stream, then a kernel writes the bytes of x
  // (planned reuse) while the all-reduce may still read them: the kernel must wait.
  constexpr int64_t kCount = 1 << 20;
  planpb::Plan plan = emptyPlan(2, 1);
  for (int r = 0; r < 2; ++r) {
    RankBuilder b(plan.mutable_ranks(r));
    int32_t w = b.parameter("w", {DType::kF32, {kCount}}, "constant", {{"value", 5.0}});
    int32_t x = b.buffer("x", {DType::kF32, {1, kCount}}, planpb::BUFFER_INPUT);
    int32_t y = b.buffer("y", {DType::kF32, {1, kCount}}, planpb::BUFFER_OUTPUT);
    int32_t reused = b.buffer("reused", {DType::kF32, {kCount}}, planpb::BUFFER_ACTIVATION, x);
    auto* infer = b.program("infer");
    input(infer, "x", x, r);
    communicate(infer, planpb::ALL_REDUCE, {x}, {y}, {0, 1});
    kernel(infer, "neg", {w}, {reused});
    output(infer, "y", y, r);
    b.finish();
  }
  auto group = makeGroup(plan);
  ASSERT_TRUE(group);
  ASSERT_TRUE(group->initializeParameters().isOk());
  for (int attempt = 0; attempt < 5; ++attempt) {
    for (int r = 0; r < 2; ++r) {
      auto* x = static_cast<float*>(group->executor(r).input("infer", "x")->data);
      for (int64_t i = 0; i < kCount; ++i) x[i] = static_cast<float>(r + 1);
    }
    ASSERT_TRUE(group->run("infer").isOk());
    for (int r = 0; r < 2; ++r) {
      std::vector<float> y = tensorValues<float>(*group->executor(r).output("infer", "y"));
      EXPECT_EQ(std::count(y.begin(), y.end(), 3.0f), kCount) << "rank " << r;
    }
  }
}

// infer on two ranks: rank 1 gathers rows of a table by ids (failing for an id out of range), then
// both all-reduce; with `rank1_reduces` false rank 1 never joins the all-reduce.
planpb::Plan gatherThenReducePlan(bool rank1_reduces) {
  planpb::Plan plan = emptyPlan(2, 1);
  for (int r = 0; r < 2; ++r) {
    RankBuilder b(plan.mutable_ranks(r));
    int32_t table = b.parameter("table", {DType::kF32, {5, 2}}, "ones");
    int32_t ids = b.buffer("ids", {DType::kI64, {3}}, planpb::BUFFER_INPUT);
    int32_t rows = b.buffer("rows", {DType::kF32, {3, 2}}, planpb::BUFFER_OUTPUT);
    auto* infer = b.program("infer");
    input(infer, "ids", ids);
    kernel(infer, "gather", {table, ids}, {rows});
    if (r == 0 || rank1_reduces) communicate(infer, planpb::ALL_REDUCE, {rows}, {rows}, {0, 1});
    output(infer, "rows", rows);
    b.finish();
  }
  return plan;
}

TEST(RankGroupTest, AFailingRankStopsTheOthersPromptlyWithItsOwnError) {
  auto group = makeGroup(gatherThenReducePlan(true), 60);
  ASSERT_TRUE(group);
  ASSERT_TRUE(group->initializeParameters().isOk());
  int64_t good[3] = {0, 1, 2}, bad[3] = {0, 9, 1};
  std::memcpy(group->executor(0).input("infer", "ids")->data, good, sizeof good);
  std::memcpy(group->executor(1).input("infer", "ids")->data, bad, sizeof bad);
  auto start = std::chrono::steady_clock::now();
  Status status = group->run("infer");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message().rfind("rank 1: instruction 0 of infer (gather): ", 0), 0u) << status.message();
  // The communicator stays stopped: a later run fails at once, naming the failed rank.
  std::memcpy(group->executor(1).input("infer", "ids")->data, good, sizeof good);
  Status again = group->run("infer");
  EXPECT_EQ(again.kind(), ErrorKind::kRuntime);  // rank 1's own earlier failure, not another rank's
  EXPECT_NE(again.message().find("stopped: rank 1 failed"), std::string::npos) << again.message();
}

TEST(RankGroupTest, ARankThatRunsOutOfMemorySaysSo) {
  // On a rank's own thread: std::bad_alloc there used to end the process (SIGABRT) without a word.
  auto group = makeGroup(gatherThenReducePlan(true), 60);
  ASSERT_TRUE(group);
  Status status = group->forEachRank([](RankExecutor& executor) -> Status {
    if (executor.rank() == 1) throw std::bad_alloc();
    return Status::ok();
  });
  EXPECT_EQ(status.kind(), ErrorKind::kRuntime);
  EXPECT_EQ(status.message().rfind("rank 1: out of memory", 0), 0u) << status.message();
}

TEST(RankGroupTest, ARankThatNeverArrivesTimesOutNamingIt) {
  auto group = makeGroup(gatherThenReducePlan(false), 0.2);
  ASSERT_TRUE(group);
  ASSERT_TRUE(group->initializeParameters().isOk());
  Status status = group->run("infer");
  EXPECT_EQ(status.kind(), ErrorKind::kRemoteRank);
  EXPECT_EQ(
      status.message(),
      "rank 0: instruction 1 of infer (all_reduce): all_reduce over ranks {0,1} timed out after 0.2 s waiting for "
      "rank 1");
}

TEST(RankGroupTest, RefusesCommunicationThatDoesNotFitThePlan) {
  planpb::Plan plan = gatherThenReducePlan(true);
  plan.mutable_ranks(1)->mutable_programs(0)->mutable_instructions(1)->set_group(1, 2);
  auto group = RankGroup::create(plan);
  ASSERT_FALSE(group.hasValue());
  EXPECT_EQ(group.status().message(),
            "rank 1: instruction 1 of infer (all_reduce): group {0,2} is not an increasing list of the plan's 2 ranks");
}

}  // namespace
}  // namespace cleave::runtime
