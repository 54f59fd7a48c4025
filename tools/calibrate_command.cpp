// `cleave calibrate`: measures this machine's GEMM, memory and local-communicator speeds and writes a cluster spec.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "frontend/model_generators.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "analysis/cluster_json.h"
#include "passes/core/compile_pipeline.h"
#include "analysis/cost_model.h"
#include "passes/training/optimizer.h"
#include "analysis/plan_timeline.h"
#include "runtime/device/kernel.h"
#include "runtime/exec/rank_group.h"
#include "tools/cli_common.h"
#include "tools/cost_commands.h"

namespace cleave::cli {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One kernel to time: its op, operand and result types and attributes.
class KernelBench {
 public:
  // The kernel of `op` on `operands` with `results` (their types from the op's shape rule when empty).
  KernelBench(OpId op, std::vector<TensorType> operands, AttrMap attrs, std::vector<TensorType> results = {})
      : op_(op), operands_(std::move(operands)), results_(std::move(results)), attrs_(std::move(attrs)) {
    if (results_.empty()) results_ = inferResultTypes(opDef(op_), operands_, attrs_).value();
  }

  OpId op() const { return op_; }
  // The kernel's op, operand and result types and attribute names: kernels alike in these cost alike.
  std::string signature() const {
    std::string text(opName(op_));
    for (const TensorType& type : operands_) text += " " + type.str();
    text += " ->";
    for (const TensorType& type : results_) text += " " + type.str();
    for (const auto& [name, value] : attrs_) text += " " + name;
    return text;
  }
  // FLOPs and bytes of one call, by the op's cost rule (the figures the roofline divides).
  OpCost cost() const { return CostModel::kernelCost(opDef(op_), operands_, results_, attrs_); }
  // The dtype the roofline takes the peak of.
  DType dtype() const { return arithmeticDType(operands_, results_); }

  // The seconds one call takes while `devices` threads call it at once, each on its own
  // zero-filled buffers and single-threaded (a device is one core of a host whose other cores
  // work too, as the ranks of a plan run): each thread's fastest call over about `budget` seconds
  // (at least 3 calls), averaged over the threads. The fastest, because other jobs on the machine
  // only ever slow a call down: the spec describes the machine, not its neighbours.
  Expected<double> seconds(int devices, double budget) const {
    const runtime::CpuKernel kernel = runtime::findCpuKernel(op_);
    if (!kernel) return Status::internal("calibrate: no CPU kernel for " + std::string(opName(op_)));
    std::vector<double> fastest(devices, std::numeric_limits<double>::infinity());
    std::vector<Status> statuses(devices);
    std::atomic<int> waiting{devices};
    auto work = [&](int device) {
      std::vector<std::vector<double>> storage;
      std::vector<const void*> inputs;
      std::vector<void*> outputs;
      for (const TensorType& type : operands_) storage.emplace_back(static_cast<size_t>(type.bytes() / 8 + 1), 0.0);
      for (const TensorType& type : results_) storage.emplace_back(static_cast<size_t>(type.bytes() / 8 + 1), 0.0);
      for (size_t i = 0; i < operands_.size(); ++i) inputs.push_back(storage[i].data());
      for (size_t i = 0; i < results_.size(); ++i) outputs.push_back(storage[operands_.size() + i].data());
      runtime::KernelCall call{OpContext{opDef(op_), operands_, results_, attrs_}, inputs, outputs, 1};
      // Start together, so that every call meets the others.
      --waiting;
      while (waiting.load() > 0) std::this_thread::yield();
      const Clock::time_point start = Clock::now();
      for (int calls = 0; calls < 3 || (secondsSince(start) < budget && calls < 100000); ++calls) {
        const Clock::time_point begin = Clock::now();
        Status status = kernel(call);
        fastest[device] = std::min(fastest[device], secondsSince(begin));
        if (!status.isOk()) {
          statuses[device] = status;
          return;
        }
      }
    };
    std::vector<std::thread> others;
    for (int device = 1; device < devices; ++device) others.emplace_back(work, device);
    work(0);
    for (std::thread& thread : others) thread.join();
    for (const Status& status : statuses)
      if (!status.isOk()) return status;
    double sum = 0;
    for (double seconds : fastest) sum += seconds;
    return sum / devices;
  }

 private:
  OpId op_;
  std::vector<TensorType> operands_, results_;
  AttrMap attrs_;
};

// One kernel of the suite and how many times the suite's programs run it.
struct SuiteKernel {
  KernelBench kernel;
  int count = 1;
};

// The kernels of the train programs of a few generated models (sizes unlike the benchmarks'), as
// plans lay them out, alike ones counted once: what the per-op efficiencies are measured on.
Expected<std::vector<SuiteKernel>> suiteKernels() {
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
  std::vector<SuiteKernel> kernels;
  std::map<std::string, size_t> index_of_signature;
  for (const Graph* model : {&mlp_model, &cnn_model, &gpt_model}) {
    CompileOptions options;
    options.model_file = "@" + model->name;
    options.train = true;
    options.training.optimizer.momentum = 0.9;
    if (model == &gpt_model) options.training.optimizer.kind = OptimizerKind::kAdamW;
    CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, compileModel(*model, options));
    const planpb::RankPlan& rank = plan.ranks(0);
    const planpb::Program* train = findProgram(rank, "train");
    if (!train) return Status::internal("calibrate: @" + model->name + " has no train program");
    auto typesOf = [&](const google::protobuf::RepeatedField<int32_t>& ids) -> Expected<std::vector<TensorType>> {
      std::vector<TensorType> types;
      for (int32_t id : ids) {
        CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(rank.buffers(id).type()));
        types.push_back(std::move(type));
      }
      return types;
    };
    for (const planpb::Instruction& instruction : train->instructions()) {
      if (instruction.kind() != planpb::KERNEL) continue;
      std::optional<OpId> op = lookupOp(instruction.op());
      if (!op || !runtime::findCpuKernel(*op)) continue;
      CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> operands, typesOf(instruction.operands()));
      CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> results, typesOf(instruction.results()));
      AttrMap attrs;
      for (const auto& [name, attr] : instruction.attrs()) {
        CLEAVE_ASSIGN_OR_RETURN(Attribute value, fromProto(attr));
        attrs.emplace(name, std::move(value));
      }
      KernelBench kernel(*op, std::move(operands), std::move(attrs), std::move(results));
      auto [found, added] = index_of_signature.try_emplace(kernel.signature(), kernels.size());
      if (added)
        kernels.push_back({std::move(kernel), 1});
      else
        ++kernels[found->second].count;
    }
  }
  return kernels;
}

// Per op, the speed its kernels in the suite reach relative to the roofline of `device`
// (whose peaks, bandwidth and overhead are already measured): the sum of their roofline times
// over the sum of their measured times, both less the overhead. Ops whose kernels take under
// 50 us in all are left out (too little to tell); ratios are clamped to [0.02, 50].
Expected<std::map<OpId, double>> measureEfficiencies(const std::vector<SuiteKernel>& kernels, const DeviceSpec& device,
                                                     int devices, double budget) {
  std::map<OpId, std::pair<double, double>> sums;  // op -> (roofline, measured)
  for (const auto& [kernel, count] : kernels) {
    auto measured = kernel.seconds(devices, budget);
    if (!measured) continue;  // a data-dependent failure on zeros: nothing to learn from it
    double roofline = rooflineTime(kernel.cost(), kernel.dtype(), device) - device.kernel_overhead_s;
    sums[kernel.op()].first += count * roofline;
    sums[kernel.op()].second += count * std::max(*measured - device.kernel_overhead_s, 1e-9);
  }
  std::map<OpId, double> efficiencies;
  for (const auto& [op, sum] : sums)
    if (sum.second >= 50e-6) efficiencies[op] = std::clamp(sum.first / sum.second, 0.02, 50.0);
  return efficiencies;
}

// A two-rank plan whose program "train" moves `floats` floats `count` times in turn: in-place
// all-reduces, or ping-pongs (rank 0 sends and receives the answer, rank 1 answers). With
// `then_read`, a kernel reads each result, so the compute thread waits for the communication
// thread as a plan's next layer does.
planpb::Plan communicationPlan(bool all_reduce, int count, int64_t floats, bool then_read) {
  planpb::Plan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_producer("cleave calibrate");
  plan.set_model_name("calibrate");
  plan.set_devices(2);
  planpb::Strategy* strategy = plan.mutable_strategy();
  strategy->set_dp(2);
  strategy->set_tp(1);
  strategy->set_pp(1);
  strategy->set_microbatches(1);
  const int64_t bytes = (floats * 4 + 63) / 64 * 64;
  for (int r = 0; r < 2; ++r) {
    planpb::RankPlan* rank = plan.add_ranks();
    rank->set_rank(r);
    rank->set_dp_index(r);
    for (int id = 0; id < 2; ++id) {  // x (the moved buffer, an input) and y (what the kernels write)
      planpb::Buffer* buffer = rank->add_buffers();
      buffer->set_id(id);
      buffer->set_name(id == 0 ? "x" : "y");
      buffer->mutable_type()->set_dtype("f32");
      buffer->mutable_type()->add_shape(floats);
      buffer->set_offset(id * bytes);
      buffer->set_kind(id == 0 ? planpb::BUFFER_INPUT : planpb::BUFFER_ACTIVATION);
    }
    rank->set_arena_bytes(2 * bytes);
    planpb::Program* program = rank->add_programs();
    program->set_name("train");
    program->set_peak_bytes(2 * bytes);
    planpb::NamedBuffer* input = program->add_inputs();
    input->set_name("x");
    input->set_buffer(0);
    auto transfer = [&](planpb::InstructionKind kind, int tag) {
      planpb::Instruction* instruction = program->add_instructions();
      instruction->set_kind(kind);
      instruction->set_stream(1);
      instruction->set_peer(1 - r);
      instruction->set_tag(tag);
      if (kind == planpb::SEND) instruction->add_operands(0);
      else instruction->add_results(0);
    };
    for (int k = 0; k < count; ++k) {
      if (all_reduce) {
        planpb::Instruction* instruction = program->add_instructions();
        instruction->set_kind(planpb::ALL_REDUCE);
        instruction->set_stream(1);
        instruction->add_group(0);
        instruction->add_group(1);
        instruction->set_reduce_op("sum");
        instruction->add_operands(0);
        instruction->add_results(0);
      } else {
        transfer(r == 0 ? planpb::SEND : planpb::RECV, 2 * k);
        transfer(r == 0 ? planpb::RECV : planpb::SEND, 2 * k + 1);
      }
      if (!then_read) continue;
      planpb::Instruction* read = program->add_instructions();
      read->set_kind(planpb::KERNEL);
      read->set_op("add");
      read->add_operands(0);
      read->add_operands(0);
      read->add_results(1);
    }
  }
  return plan;
}

// The seconds of the fastest run of `plan`'s program on a local rank group (one core per rank),
// over runs filling about `budget` seconds (at least 5).
Expected<double> runSeconds(const planpb::Plan& plan, double budget) {
  CLEAVE_TRY(validatePlan(plan));
  runtime::RankGroupOptions options;
  options.threads = plan.ranks_size();
  options.timeout_seconds = 60;
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<runtime::RankGroup> group, runtime::RankGroup::create(plan, options));
  CLEAVE_TRY(group->run("train"));  // warm up
  double fastest = std::numeric_limits<double>::infinity();
  const Clock::time_point start = Clock::now();
  for (int runs = 0; runs < 5 || (secondsSince(start) < budget && runs < 100000); ++runs) {
    const Clock::time_point begin = Clock::now();
    CLEAVE_TRY(group->run("train"));
    fastest = std::min(fastest, secondsSince(begin));
  }
  return fastest;
}

// The seconds one collective (or ping-pong) of `floats` floats takes through the runtime: the
// difference between programs of 9 and of 1, over 8.
Expected<double> communicationSeconds(bool all_reduce, int64_t floats, bool then_read, double budget) {
  CLEAVE_ASSIGN_OR_RETURN(double one, runSeconds(communicationPlan(all_reduce, 1, floats, then_read), budget));
  CLEAVE_ASSIGN_OR_RETURN(double nine, runSeconds(communicationPlan(all_reduce, 9, floats, then_read), budget));
  return std::max(nine - one, 1e-9) / 8;
}

// Alpha-beta fit of a link from a small and a large message: latency per step, bytes/s per rank.
LinkSpec fitLink(std::string name, double small_seconds, int latency_steps, double large_seconds, double bytes_per_rank) {
  LinkSpec link;
  link.name = std::move(name);
  link.latency = small_seconds / latency_steps;
  link.bandwidth = bytes_per_rank / std::max(large_seconds - latency_steps * link.latency, 1e-9);
  return link;
}

}  // namespace

int runCalibrate(const CalibrateFlags& flags) {
  const double budget = flags.seconds;
  const int devices = flags.devices > 0 ? flags.devices : std::max(1u, std::thread::hardware_concurrency());
  auto f32 = [](Shape shape) { return TensorType{DType::kF32, std::move(shape)}; };
  auto f64 = [](Shape shape) { return TensorType{DType::kF64, std::move(shape)}; };

  // 1. GEMM: the matmul kernel on 512^3 products (f32 and f64), one core.
  KernelBench gemm32(OpId::matmul, {f32({512, 512}), f32({512, 512})}, {});
  KernelBench gemm64(OpId::matmul, {f64({512, 512}), f64({512, 512})}, {});
  auto gemm32_s = gemm32.seconds(devices, budget);
  if (!gemm32_s) return reportError(gemm32_s.status());
  auto gemm64_s = gemm64.seconds(devices, budget);
  if (!gemm64_s) return reportError(gemm64_s.status());

  // 2. Memory bandwidth: an elementwise add over 4M floats (48 MB read and written), and the
  //    fixed cost of a kernel: an add of one element.
  KernelBench stream(OpId::add, {f32({4 << 20}), f32({4 << 20})}, {});
  auto stream_s = stream.seconds(devices, budget);
  if (!stream_s) return reportError(stream_s.status());
  KernelBench tiny(OpId::add, {f32({1}), f32({1})}, {});
  auto tiny_s = tiny.seconds(devices, budget);
  if (!tiny_s) return reportError(tiny_s.status());

  // 3. Two ranks through the runtime (executor, communication thread, local communicator): an
  //    all-reduce and a send/recv of 4 bytes, each read by a kernel (latency: the handoffs
  //    between threads included), and of 16 MB (bandwidth).
  constexpr int64_t kLargeFloats = 4 << 20;
  auto all_reduce_small = communicationSeconds(true, 1, true, budget);
  auto all_reduce_large = communicationSeconds(true, kLargeFloats, false, budget);
  auto ping_pong_small = communicationSeconds(false, 1, true, budget);
  auto ping_pong_large = communicationSeconds(false, kLargeFloats, false, budget);
  for (const auto* measured : {&all_reduce_small, &all_reduce_large, &ping_pong_small, &ping_pong_large})
    if (!*measured) return reportError(measured->status().withContext("calibrate: local communication: "));

  // 4. The spec: one device per core, the link fitted to the all-reduce (what plans mostly move),
  //    then each op's efficiency relative to that roofline on the suite's kernels.
  const double large_bytes = static_cast<double>(kLargeFloats) * sizeof(float);
  ClusterSpec cluster;
  cluster.name = "cpu-local";
  cluster.device.name = "cpu core (calibrated)";
  cluster.device.peak_flops = {{DType::kF32, gemm32.cost().flops / *gemm32_s},
                               {DType::kF64, gemm64.cost().flops / *gemm64_s}};
  cluster.device.memory_bandwidth = stream.cost().bytes / *stream_s;
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  cluster.device.memory_bytes = physical / devices;
  cluster.device.kernel_overhead_s = *tiny_s;
  cluster.hosts = 1;
  cluster.devices_per_host = devices;
  cluster.intra_host = fitLink("loopback (calibrated all-reduce)", *all_reduce_small,
                               commLatencySteps(CommKind::kAllReduce, 2), *all_reduce_large,
                               commBytesPerRank(CommKind::kAllReduce, 2, large_bytes));
  cluster.inter_host = cluster.intra_host;
  const LinkSpec send_link = fitLink("send", *ping_pong_small / 2, 1, *ping_pong_large / 2, large_bytes);
  auto suite = suiteKernels();
  if (!suite) return reportError(suite.status().withContext("calibrate: the kernel suite: "));
  auto efficiencies = measureEfficiencies(*suite, cluster.device, devices, budget / 6);
  if (!efficiencies) return reportError(efficiencies.status());
  cluster.device.kernel_efficiency = std::move(*efficiencies);

  Status written = writeOutput(flags.output, clusterToJson(cluster));
  if (!written) return reportError(written);
  if (flags.output.empty() || flags.output == "-") return 0;
  std::printf("wrote %s: %d device(s) of one core each\n", flags.output.c_str(), devices);
  std::printf("  gemm f32 512^3: %.1f GFLOP/s; f64: %.1f GFLOP/s\n", cluster.device.peak_flops[DType::kF32] / 1e9,
              cluster.device.peak_flops[DType::kF64] / 1e9);
  std::printf("  memory (elementwise add, 48 MB): %.2f GB/s; kernel overhead %.2f us\n",
              cluster.device.memory_bandwidth / 1e9, cluster.device.kernel_overhead_s * 1e6);
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
