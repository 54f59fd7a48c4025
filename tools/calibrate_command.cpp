// `cleave calibrate`: measures this machine's GEMM, memory and local-communicator speeds and writes a cluster spec.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "analysis/calibration_fit.h"
#include "analysis/cluster_json.h"
#include "analysis/cost_model.h"
#include "frontend/model_generators.h"
#include "ir/plan.pb.h"
#include "passes/core/compile_pipeline.h"
#include "passes/training/optimizer.h"
#include "runtime/exec/calibration.h"
#include "tools/cli_common.h"
#include "tools/cost_commands.h"

namespace cleave::cli {
namespace {

// FLOPs and bytes of one call of `kernel`, by the op's cost rule (the figures the roofline divides).
OpCost costOf(const runtime::KernelInstance& kernel) {
  return CostModel::kernelCost(opDef(kernel.op), kernel.operands, kernel.results, kernel.attrs);
}

// The kernels of the train programs of a few generated models (sizes unlike the benchmarks'), as
// plans lay them out, alike ones counted once: what the per-op efficiencies are measured on.
Expected<std::vector<runtime::CountedKernel>> suiteKernels() {
  MlpSpec mlp;
  mlp.hidden = {1024};
  mlp.batch = 64;
  CnnSpec cnn;
  cnn.batch = 32;
  GptSpec gpt;
  gpt.layers = 2;
  gpt.hidden = 192;
  gpt.heads = 3;
  gpt.seq = 48;
  gpt.vocab = 768;
  gpt.batch = 6;
  CLEAVE_ASSIGN_OR_RETURN(Graph mlp_model, generateMlp(mlp));
  CLEAVE_ASSIGN_OR_RETURN(Graph cnn_model, generateCnn(cnn));
  CLEAVE_ASSIGN_OR_RETURN(Graph gpt_model, generateGpt(gpt));
  std::vector<runtime::CountedKernel> kernels;
  for (const Graph* model : {&mlp_model, &cnn_model, &gpt_model}) {
    CompileOptions options;
    options.model_file = "@" + model->name;
    options.train = true;
    options.training.optimizer.momentum = 0.9;
    if (model == &gpt_model) options.training.optimizer.kind = OptimizerKind::kAdamW;
    CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, compileModel(*model, options));
    CLEAVE_TRY(runtime::collectCpuKernels(plan.ranks(0), "train", kernels).withContext("@" + model->name + ": "));
  }
  return kernels;
}

// Each suite kernel measured (runtime::kernelSeconds) with its cost; kernels that fail on zeros
// (a data-dependent failure: nothing to learn from it) are left out.
std::vector<MeasuredKernel> measureSuite(const std::vector<runtime::CountedKernel>& kernels, int devices, double budget) {
  std::vector<MeasuredKernel> measured;
  for (const auto& [kernel, count] : kernels) {
    auto seconds = runtime::kernelSeconds(kernel, devices, budget);
    if (!seconds) continue;
    int64_t footprint = 0;
    for (const auto* types : {&kernel.operands, &kernel.results})
      for (const TensorType& type : *types) footprint += type.bytes();
    measured.push_back(
        {kernel.op, costOf(kernel), arithmeticDType(kernel.operands, kernel.results), count, footprint, *seconds});
  }
  return measured;
}

// The bytes of this machine's largest cache (the last level, which the cores share), from sysfs,
// else glibc; 0 when neither tells.
int64_t lastLevelCacheBytes() {
  int64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
    std::FILE* file = std::fopen(path.c_str(), "r");
    if (!file) continue;
    long long size = 0;
    char unit = 0;
    if (std::fscanf(file, "%lld%c", &size, &unit) >= 1) {
      if (unit == 'K') size <<= 10;
      if (unit == 'M') size <<= 20;
      largest = std::max<int64_t>(largest, size);
    }
    std::fclose(file);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (largest == 0) largest = std::max<long>(sysconf(_SC_LEVEL3_CACHE_SIZE), 0);
#endif
  return largest;
}

}  // namespace

int runCalibrate(const CalibrateFlags& flags) {
  const double budget = flags.seconds;
  const int devices = flags.devices > 0 ? flags.devices : std::max(1u, std::thread::hardware_concurrency());
  auto f32 = [](Shape shape) { return TensorType{DType::kF32, std::move(shape)}; };
  auto f64 = [](Shape shape) { return TensorType{DType::kF64, std::move(shape)}; };

  // 1. GEMM: the matmul kernel on 512^3 products (f32 and f64), one core.
  auto gemm32 = runtime::KernelInstance::of(OpId::matmul, {f32({512, 512}), f32({512, 512})});
  auto gemm64 = runtime::KernelInstance::of(OpId::matmul, {f64({512, 512}), f64({512, 512})});
  // 2. Memory bandwidth: an elementwise add over 4M floats (48 MB read and written); the cache's:
  //    an add over 256K floats (3 MB), called on the same buffers again and again; and the fixed
  //    cost of a kernel: an add of one element.
  auto stream = runtime::KernelInstance::of(OpId::add, {f32({4 << 20}), f32({4 << 20})});
  auto cached = runtime::KernelInstance::of(OpId::add, {f32({256 << 10}), f32({256 << 10})});
  auto tiny = runtime::KernelInstance::of(OpId::add, {f32({1}), f32({1})});
  for (const auto* kernel : {&gemm32, &gemm64, &stream, &cached, &tiny})
    if (!*kernel) return reportError(kernel->status());
  auto gemm32_s = runtime::kernelSeconds(*gemm32, devices, budget);
  if (!gemm32_s) return reportError(gemm32_s.status());
  auto gemm64_s = runtime::kernelSeconds(*gemm64, devices, budget);
  if (!gemm64_s) return reportError(gemm64_s.status());
  auto stream_s = runtime::kernelSeconds(*stream, devices, budget);
  if (!stream_s) return reportError(stream_s.status());
  auto cached_s = runtime::kernelSeconds(*cached, devices, budget);
  if (!cached_s) return reportError(cached_s.status());
  auto tiny_s = runtime::kernelSeconds(*tiny, devices, budget);
  if (!tiny_s) return reportError(tiny_s.status());

  // 3. Two ranks through the runtime (executor, communication thread, local communicator): an
  //    all-reduce and a send/recv of 4 bytes, each read by a kernel (latency: the handoffs
  //    between threads included), and of 16 MB (bandwidth).
  constexpr int64_t kLargeFloats = 4 << 20;
  auto all_reduce_small = runtime::communicationSeconds(true, 1, true, budget);
  auto all_reduce_large = runtime::communicationSeconds(true, kLargeFloats, false, budget);
  auto ping_pong_small = runtime::communicationSeconds(false, 1, true, budget);
  auto ping_pong_large = runtime::communicationSeconds(false, kLargeFloats, false, budget);
  for (const auto* measured : {&all_reduce_small, &all_reduce_large, &ping_pong_small, &ping_pong_large})
    if (!*measured) return reportError(measured->status().withContext("calibrate: local communication: "));

  // 4. The spec: one device per core, the link fitted to the all-reduce (what plans mostly move),
  //    then each op's efficiency relative to that roofline on the suite's kernels.
  const double large_bytes = static_cast<double>(kLargeFloats) * sizeof(float);
  ClusterSpec cluster;
  cluster.name = "cpu-local";
  cluster.device.name = "cpu core (calibrated)";
  cluster.device.peak_flops = {{DType::kF32, costOf(*gemm32).flops / *gemm32_s},
                               {DType::kF64, costOf(*gemm64).flops / *gemm64_s}};
  cluster.device.memory_bandwidth = costOf(*stream).bytes / *stream_s;
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  cluster.device.memory_bytes = physical / devices;
  cluster.device.kernel_overhead_s = *tiny_s;
  // The cache model: each device's share of the last-level cache, when the machine tells its size
  // and the share holds the 3 MB add whose speed is the cache's.
  const int64_t cache_share = lastLevelCacheBytes() / devices;
  const double cache_bandwidth = costOf(*cached).bytes / std::max(*cached_s - *tiny_s, 1e-9);
  if (cache_share >= 2 * int64_t{3 << 20} && cache_bandwidth > cluster.device.memory_bandwidth) {
    cluster.device.cache_bytes = cache_share;
    cluster.device.cache_bandwidth = cache_bandwidth;
  }
  cluster.hosts = 1;
  cluster.devices_per_host = devices;
  cluster.intra_host = fitLink("loopback (calibrated all-reduce)", *all_reduce_small,
                               commLatencySteps(CommKind::kAllReduce, 2), *all_reduce_large,
                               commBytesPerRank(CommKind::kAllReduce, 2, large_bytes));
  cluster.inter_host = cluster.intra_host;
  const LinkSpec send_link = fitLink("send", *ping_pong_small / 2, 1, *ping_pong_large / 2, large_bytes);
  auto suite = suiteKernels();
  if (!suite) return reportError(suite.status().withContext("calibrate: the kernel suite: "));
  cluster.device.kernel_efficiency = kernelEfficiencies(measureSuite(*suite, devices, budget / 6), cluster.device);

  Status written = writeOutput(flags.output, clusterToJson(cluster));
  if (!written) return reportError(written);
  if (flags.output.empty() || flags.output == "-") return 0;
  std::printf("wrote %s: %d device(s) of one core each\n", flags.output.c_str(), devices);
  std::printf("  gemm f32 512^3: %.1f GFLOP/s; f64: %.1f GFLOP/s\n", cluster.device.peak_flops[DType::kF32] / 1e9,
              cluster.device.peak_flops[DType::kF64] / 1e9);
  std::printf("  memory (elementwise add, 48 MB): %.2f GB/s; kernel overhead %.2f us\n",
              cluster.device.memory_bandwidth / 1e9, cluster.device.kernel_overhead_s * 1e6);
  if (cluster.device.cache_bytes > 0)
    std::printf("  cache: %.1f MiB per device at %.2f GB/s (elementwise add, 3 MB, again and again)\n",
                static_cast<double>(cluster.device.cache_bytes) / (1 << 20), cluster.device.cache_bandwidth / 1e9);
  else
    std::printf("  cache: not modelled (its size unknown, or under 6 MB per device)\n");
  std::printf("  all-reduce (2 ranks): %.2f GB/s per rank, %.2f us per step; send/recv: %.2f GB/s, %.2f us\n",
              cluster.intra_host.bandwidth / 1e9, cluster.intra_host.latency * 1e6, send_link.bandwidth / 1e9,
              send_link.latency * 1e6);
  std::string efficiencies_text;
  for (const auto& [op, efficiency] : cluster.device.kernel_efficiency) {
    char entry[64];
    std::snprintf(entry, sizeof entry, "%s%s %.2f", efficiencies_text.empty() ? "" : ", ",
                  std::string(opName(op)).c_str(), efficiency);
    efficiencies_text += entry;
  }
  std::printf("  kernel efficiency (of the roofline, on %zu distinct suite kernels): %s\n", suite->size(),
              efficiencies_text.c_str());
  return 0;
}

}  // namespace cleave::cli
