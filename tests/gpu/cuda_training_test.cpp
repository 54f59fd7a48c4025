// GPU runs against the CPU: single-GPU training of the MLP and the Fashion-MNIST convnet gives the
// CPU's losses and parameters, inference gives its outputs, a GPU checkpoint resumes on the CPU, and
// NCCL data-parallel runs (one rank; two when there are two GPUs) match the CPU's local backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "frontend/model_generators.h"
#include "ir/plan.pb.h"
#include "ir/shared_programs.h"
#include "passes/core/compile_pipeline.h"
#include "passes/training/loss_head.h"
#include "passes/training/optimizer.h"
#include "runtime/train/checkpoint.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/io/data_source.h"
#include "runtime/device/element_access.h"
#include "runtime/exec/rank_group.h"

namespace cleave::runtime {
namespace {

#define SKIP_WITHOUT_GPU(needed)                                                                         \
  do {                                                                                                   \
    const int gpus = cudaDeviceCount();                                                                  \
    if (gpus == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount finds none (no GPU or no driver)"; \
    if (gpus < (needed)) GTEST_SKIP() << "needs " << (needed) << " CUDA devices, this machine has " << gpus; \
  } while (0)

constexpr double kLossTolerance = 1e-3;  // relative, the bar for single-GPU training

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cleave-gpu-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Compiles `model` for training (SGD with momentum: a step moves every parameter) with `dp` ranks,
// or for inference.
planpb::Plan compile(const Expected<Graph>& model, bool train, int dp = 1) {
  EXPECT_TRUE(model.hasValue()) << model.status().message();
  CompileOptions options;
  options.model_file = "generated";
  options.dp = dp;
  options.train = train;
  if (train) {
    options.training.loss = *parseLossKind("softmax_cross_entropy");
    options.training.optimizer = *parseOptimizerSpec("sgd:lr=0.05,momentum=0.9");
  }
  auto plan = compileModel(*model, options);
  EXPECT_TRUE(plan.hasValue()) << plan.status().message();
  if (plan) {
    EXPECT_TRUE(expandSharedPrograms(*plan).isOk());
  }
  return std::move(*plan);
}

std::unique_ptr<RankGroup> makeGroup(const planpb::Plan& plan, const std::string& device,
                                     RankBackend backend = RankBackend::kLocal) {
  RankGroupOptions options;
  options.device = device;
  options.backend = backend;
  options.threads = 2;
  auto group = RankGroup::create(plan, options);
  EXPECT_TRUE(group.hasValue()) << device << ": " << group.status().message();
  return group ? std::move(*group) : nullptr;
}

// Initializes the group's parameters and runs `steps` training steps on seeded synthetic data;
// the loss of every step.
std::vector<double> trainSteps(RankGroup& group, const planpb::Plan& plan, int steps, bool initialize = true) {
  std::vector<double> losses;
  if (initialize) {
    Status initialized = group.initializeParameters();
    EXPECT_TRUE(initialized.isOk()) << initialized.message();
  }
  auto batch = GlobalBatch::create(group, "train");
  EXPECT_TRUE(batch.hasValue()) << batch.status().message();
  if (!batch) return losses;
  DataSourceOptions data{DataSplit::kTrain, 7, plan.training().labels_input()};
  auto source = openDataSource("synthetic", (*batch)->inputs(), data);
  EXPECT_TRUE(source.hasValue()) << source.status().message();
  if (!source) return losses;
  for (int step = 0; step < steps; ++step) {
    EXPECT_TRUE((*source)->next().hasValue());
    Status scattered = (*batch)->scatter();
    EXPECT_TRUE(scattered.isOk()) << scattered.message();
    Status ran = group.run("train");
    EXPECT_TRUE(ran.isOk()) << ran.message();
    if (!ran.isOk()) break;
    auto loss = gatherOutput(group, "train", plan.training().loss_output());
    EXPECT_TRUE(loss.hasValue()) << loss.status().message();
    if (!loss) break;
    losses.push_back(loadElement(loss->type.dtype, loss->bytes.data(), 0));
  }
  return losses;
}

// Every f32 parameter of rank 0, read to the host, by name.
std::vector<std::pair<std::string, std::vector<float>>> readParameters(RankGroup& group) {
  std::vector<std::pair<std::string, std::vector<float>>> result;
  RankExecutor& executor = group.executor(0);
  for (const ParameterTensor& param : executor.parameters()) {
    if (param.view.type.dtype != DType::kF32) continue;
    std::vector<float> values(static_cast<size_t>(param.view.type.numel()));
    Status read = executor.device().copyToHost(values.data(), param.view.data, param.view.type.bytes());
    EXPECT_TRUE(read.isOk()) << read.message();
    result.emplace_back(param.name, std::move(values));
  }
  return result;
}

void expectLossesClose(const std::vector<double>& cpu, const std::vector<double>& gpu, const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], kLossTolerance * std::max(1e-6, std::abs(cpu[i])))
        << what << ": loss of step " << i + 1;
}

// Parameters agree within `tolerance` of the tensor's largest magnitude.
void expectParametersClose(RankGroup& cpu, RankGroup& gpu, double tolerance) {
  auto expected = readParameters(cpu);
  auto actual = readParameters(gpu);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    const auto& [name, want] = expected[t];
    const auto& got = actual[t].second;
    ASSERT_EQ(name, actual[t].first);
    double scale = 1e-6;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LE(worst, tolerance * scale) << "parameter '" << name << "' differs by " << worst << " (scale " << scale << ")";
  }
}

// Trains `plan` for `steps` steps on the CPU and on GPU 0; losses and parameters must agree.
void expectGpuTrainsLikeCpu(const planpb::Plan& plan, int steps) {
  auto cpu = makeGroup(plan, "cpu");
  auto gpu = makeGroup(plan, "cuda");
  ASSERT_TRUE(cpu && gpu);
  std::vector<double> cpu_losses = trainSteps(*cpu, plan, steps);
  std::vector<double> gpu_losses = trainSteps(*gpu, plan, steps);
  expectLossesClose(cpu_losses, gpu_losses, "cuda vs cpu");
  expectParametersClose(*cpu, *gpu, 1e-3);
}

TEST(CudaTraining, MlpMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  MlpSpec spec;
  spec.batch = 64;
  expectGpuTrainsLikeCpu(compile(generateMlp(spec), true), 5);
}

TEST(CudaTraining, FashionCnnMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  CnnSpec spec;
  spec.batch = 32;
  expectGpuTrainsLikeCpu(compile(generateCnn(spec), true), 5);
}

TEST(CudaTraining, InferenceMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  CnnSpec spec;
  spec.batch = 16;
  planpb::Plan plan = compile(generateCnn(spec), false);
  std::vector<std::vector<uint8_t>> logits;
  for (const std::string device : {"cpu", "cuda"}) {
    auto group = makeGroup(plan, device);
    ASSERT_TRUE(group);
    ASSERT_TRUE(group->initializeParameters().isOk());
    auto batch = GlobalBatch::create(*group, "infer");
    ASSERT_TRUE(batch.hasValue()) << batch.status().message();
    auto source = openDataSource("synthetic", (*batch)->inputs(), DataSourceOptions{DataSplit::kTrain, 3, ""});
    ASSERT_TRUE(source.hasValue()) << source.status().message();
    ASSERT_TRUE((*source)->next().hasValue());
    ASSERT_TRUE((*batch)->scatter().isOk());
    Status ran = group->run("infer");
    ASSERT_TRUE(ran.isOk()) << device << ": " << ran.message();
    auto output = gatherOutput(*group, "infer", "logits");
    ASSERT_TRUE(output.hasValue()) << output.status().message();
    logits.push_back(output->bytes);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  std::vector<float> cpu(logits[0].size() / 4), gpu(cpu.size());
  std::memcpy(cpu.data(), logits[0].data(), logits[0].size());
  std::memcpy(gpu.data(), logits[1].data(), logits[1].size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::max(1.0f, std::abs(cpu[i]))) << "logit " << i;
}

TEST(CudaTraining, GpuCheckpointResumesOnCpu) {
  SKIP_WITHOUT_GPU(1);
  MlpSpec spec;
  spec.batch = 32;
  planpb::Plan plan = compile(generateMlp(spec), true);
  TempDir dir;
  // 1. Three steps on the GPU, saved.
  auto gpu = makeGroup(plan, "cuda");
  ASSERT_TRUE(gpu);
  ASSERT_EQ(trainSteps(*gpu, plan, 3).size(), 3u);
  auto saved = saveCheckpoint(dir.path(), *gpu, CheckpointState{3, DataPosition{0, 3}, 7});
  ASSERT_TRUE(saved.hasValue()) << saved.status().message();
  // 2. Loaded on the CPU: the same bytes.
  auto cpu = makeGroup(plan, "cpu");
  ASSERT_TRUE(cpu);
  auto loaded = loadLatestCheckpoint(dir.path(), *cpu);
  ASSERT_TRUE(loaded.hasValue()) << loaded.status().message();
  EXPECT_EQ(loaded->step, 3);
  auto on_gpu = readParameters(*gpu);
  auto on_cpu = readParameters(*cpu);
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  for (size_t t = 0; t < on_gpu.size(); ++t) EXPECT_EQ(on_gpu[t].second, on_cpu[t].second) << on_gpu[t].first;
  // 3. The next step runs from there on both and agrees.
  std::vector<double> cpu_next = trainSteps(*cpu, plan, 1, /*initialize=*/false);
  std::vector<double> gpu_next = trainSteps(*gpu, plan, 1, /*initialize=*/false);
  expectLossesClose(cpu_next, gpu_next, "after the checkpoint");
}

TEST(CudaTraining, UnknownGpuIsARuntimeError) {
  SKIP_WITHOUT_GPU(1);
  auto device = createDevice("cuda:" + std::to_string(cudaDeviceCount()));
  ASSERT_FALSE(device.hasValue());
  EXPECT_EQ(device.status().kind(), ErrorKind::kRuntime) << device.status().message();
}

// A data-parallel plan with `dp` ranks through NCCL, one GPU per rank, against the CPU's local backend.
void expectNcclLikeLocal(int dp) {
  MlpSpec spec;
  spec.batch = 64;
  planpb::Plan plan = compile(generateMlp(spec), true, dp);
  ASSERT_EQ(plan.ranks_size(), dp);
  auto cpu = makeGroup(plan, "cpu");
  auto gpu = makeGroup(plan, "cuda", RankBackend::kNccl);
  ASSERT_TRUE(cpu && gpu);
  std::vector<double> cpu_losses = trainSteps(*cpu, plan, 4);
  std::vector<double> gpu_losses = trainSteps(*gpu, plan, 4);
  expectLossesClose(cpu_losses, gpu_losses, "nccl dp " + std::to_string(dp) + " vs local");
  expectParametersClose(*cpu, *gpu, 1e-3);
}

TEST(CudaTraining, NcclOneRankDataParallel) {
  SKIP_WITHOUT_GPU(1);
  expectNcclLikeLocal(1);
}

TEST(CudaTraining, NcclTwoRankDataParallel) {
  SKIP_WITHOUT_GPU(2);
  expectNcclLikeLocal(2);
}

}  // namespace
}  // namespace cleave::runtime
