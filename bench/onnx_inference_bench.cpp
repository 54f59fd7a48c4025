// Inference latency of an imported ONNX model on cleave's CPU runtime: import, compile, then time the
// plan's "infer" program over repeated runs on random inputs of the model's types.
//
// Usage: onnx_inference_bench MODEL.onnx [--batch B] [--threads T] [--iterations N] [--warmup W] [--profile]
// Prints one line: "<model> batch B threads T: median M ms per batch over N runs"; with --profile,
// first the time per op of the timed runs (ms per batch, largest first; instructions timed one by one).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "ir/plan.pb.h"
#include "passes/core/compile_pipeline.h"
#include "runtime/device/device.h"
#include "runtime/exec/execution_trace.h"
#include "runtime/exec/executor.h"

namespace cleave {
namespace {

// Fills `input` with uniform values: floats in [-1, 1), integers in [0, value_limit) (or [0, 2)).
void fillRandom(const runtime::NamedTensor& input, std::mt19937& rng) {
  const int64_t count = input.view.type.numel();
  switch (input.view.type.dtype) {
    case DType::kF32: {
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      auto* data = static_cast<float*>(input.view.data);
      for (int64_t i = 0; i < count; ++i) data[i] = uniform(rng);
      return;
    }
    case DType::kI64: {
      std::uniform_int_distribution<int64_t> uniform(0, std::max<int64_t>(input.value_limit, 2) - 1);
      auto* data = static_cast<int64_t*>(input.view.data);
      for (int64_t i = 0; i < count; ++i) data[i] = uniform(rng);
      return;
    }
    default:
      return;  // other dtypes keep the arena's zeros
  }
}

int runBench(int argc, char** argv) {
  CLI::App app("onnx_inference_bench: times an ONNX model's inference on cleave's CPU runtime", "onnx_inference_bench");
  std::string model;
  int64_t batch = 0;
  int threads = 1, iterations = 50, warmup = 5;
  app.add_option("MODEL", model, "ONNX model")->required();
  app.add_option("--batch", batch, "Batch (the model's symbolic dim 0)");
  app.add_option("--threads", threads, "Threads per kernel");
  app.add_option("--iterations", iterations, "Timed runs")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed runs first");
  bool profile = false;
  app.add_flag("--profile", profile, "Also print the time per op (ms per batch) over the timed runs");
  std::string winograd = "on";
  app.add_option("--winograd", winograd, "As cleave compile --winograd")->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);

  // 1. Import, compile for one device, prepare.
  OnnxImportOptions import_options;
  import_options.batch = batch;
  auto graph = importOnnxModel(model, import_options);
  if (!graph) return std::fprintf(stderr, "error: %s\n", graph.status().message().c_str()), 1;
  CompileOptions options;
  options.model_file = model;
  options.producer = "onnx_inference_bench";
  options.batch = batch;
  options.winograd = winograd == "on";
  auto plan = compileModel(*graph, options);
  if (!plan) return std::fprintf(stderr, "error: %s\n", plan.status().message().c_str()), 1;
  auto device = runtime::createDevice("cpu");
  if (!device) return std::fprintf(stderr, "error: %s\n", device.status().message().c_str()), 1;
  runtime::ExecutorOptions executor_options;
  executor_options.threads = threads;
  auto executor = runtime::createSingleDeviceExecutor(*plan, **device, executor_options);
  if (!executor) return std::fprintf(stderr, "error: %s\n", executor.status().message().c_str()), 1;
  runtime::RankExecutor& exec = **executor;
  if (Status ready = exec.initializeParameters(); !ready) return std::fprintf(stderr, "error: %s\n", ready.message().c_str()), 1;

  // 2. Random inputs, kept on the host: the memory plan may reuse an input's bytes once it has been
  //    read, so every run gets them copied in again (outside the timed part).
  std::mt19937 rng(1);
  auto inputs = exec.inputs("infer");
  if (!inputs) return std::fprintf(stderr, "error: %s\n", inputs.status().message().c_str()), 1;
  std::vector<std::vector<uint8_t>> host_inputs;
  for (const auto& input : *inputs) {
    fillRandom(input, rng);
    const auto* bytes = static_cast<const uint8_t*>(input.view.data);
    host_inputs.emplace_back(bytes, bytes + input.view.type.bytes());
  }
  // 3. Warm-up and timed runs.
  std::vector<double> milliseconds;
  runtime::ExecutionTrace trace;
  for (int i = 0; i < warmup + iterations; ++i) {
    if (profile && i == warmup) exec.setTrace(&trace);
    for (size_t k = 0; k < host_inputs.size(); ++k)
      std::memcpy((*inputs)[k].view.data, host_inputs[k].data(), host_inputs[k].size());
    auto start = std::chrono::steady_clock::now();
    if (Status ran = exec.run("infer"); !ran) return std::fprintf(stderr, "error: %s\n", ran.message().c_str()), 1;
    std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    if (i >= warmup) milliseconds.push_back(elapsed.count());
  }
  std::sort(milliseconds.begin(), milliseconds.end());
  if (profile) {
    std::map<std::string, double> per_op;
    double total = 0;
    for (const runtime::TraceEvent& event : trace.events()) {
      per_op[event.name] += event.duration_us / 1e3 / iterations;
      total += event.duration_us / 1e3 / iterations;
    }
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto& [name, ms] : per_op) ranked.emplace_back(ms, name);
    std::sort(ranked.rbegin(), ranked.rend());
    for (const auto& [ms, name] : ranked) std::printf("  %-24s %8.3f ms  %5.1f%%\n", name.c_str(), ms, 100 * ms / total);
  }
  std::printf("%s batch %lld threads %d: median %.4f ms per batch over %d runs\n", model.c_str(),
              static_cast<long long>(plan->global_batch()), threads, milliseconds[milliseconds.size() / 2], iterations);
  return 0;
}

}  // namespace
}  // namespace cleave

int main(int argc, char** argv) { return cleave::runBench(argc, argv); }
