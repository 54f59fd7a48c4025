// The subcommands that make and use plans: compile, run, and inspect of a .cplan.
#include "tools/plan_commands.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontend/onnx_importer.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/text_format.h"
#include "passes/compile_pipeline.h"
#include "passes/loss_head.h"
#include "passes/memory_planner.h"
#include "passes/optimizer.h"
#include "runtime/checkpoint.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/inference.h"
#include "runtime/trainer.h"
#include "tools/cli_common.h"

namespace cleave::cli {
namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// The model at `path`: cleave text IR, or ONNX imported with `batch` for its symbolic batch dim.
Expected<Graph> loadModel(const std::string& path, int64_t batch) {
  if (endsWith(path, ".onnx")) {
    OnnxImportOptions options;
    options.batch = batch;
    return importOnnxModel(path, options);
  }
  if (!endsWith(path, ".cir"))
    return Status::badInput("cannot compile '" + path + "': expected a model file (.cir or .onnx)");
  return loadGraphFile(path);
}

// Instructions and bytes moved by collectives, per rank.
struct RankCounts {
  int64_t instructions = 0;
  int64_t comm_bytes = 0;
};

RankCounts countRank(const planpb::RankPlan& rank) {
  RankCounts counts;
  for (const auto& program : rank.programs()) {
    counts.instructions += program.instructions_size();
    for (const auto& instruction : program.instructions()) {
      if (instruction.kind() == planpb::KERNEL || instruction.kind() == planpb::COPY) continue;
      for (int id : instruction.operands()) {
        auto type = fromProto(rank.buffers(id).type());
        if (type) counts.comm_bytes += type->bytes();
      }
    }
  }
  return counts;
}

}  // namespace

int runCompile(const CompileFlags& flags, const std::string& producer) {
  if (!flags.strategy.empty()) return reportError(Status::usage("--strategy auto: not built yet (see issue 8)"));
  if (!flags.cluster.empty()) return reportError(Status::usage("--cluster: not built yet (see issue 8)"));
  int product = flags.dp * flags.tp * flags.pp;
  if (flags.devices != 0 && flags.devices != product)
    return reportError(Status::usage("--devices " + std::to_string(flags.devices) + " differs from dp*tp*pp = " +
                                     std::to_string(product)));
  auto model = loadModel(flags.model, flags.batch);
  if (!model) return reportError(model.status());

  CompileOptions options;
  options.model_file = flags.model;
  options.producer = producer;
  options.batch = flags.batch;
  options.dp = flags.dp;
  options.tp = flags.tp;
  options.pp = flags.pp;
  options.microbatches = flags.microbatches;
  options.schedule = flags.schedule;
  options.train = flags.train;
  if (flags.train) {
    auto loss = parseLossKind(flags.loss);
    if (!loss) return reportError(loss.status());
    auto optimizer = parseOptimizerSpec(flags.optimizer);
    if (!optimizer) return reportError(optimizer.status());
    options.training.loss = *loss;
    options.training.optimizer = *optimizer;
  }
  auto plan = compileModel(*model, options);
  if (!plan) return reportError(plan.status());
  Status written = writePlanFile(*plan, flags.output);
  if (!written) return reportError(written);

  const planpb::RankPlan& rank = plan->ranks(0);
  MemoryReport memory = memoryReport(rank);
  std::cout << "wrote " << flags.output << ": " << (flags.train ? "training" : "inference") << " plan, "
            << plan->devices() << " device(s), batch " << plan->global_batch() << ", " << countRank(rank).instructions
            << " instructions, arena " << mib(memory.arena_bytes) << " (parameters " << mib(memory.param_bytes)
            << ", optimizer state " << mib(memory.optimizer_state_bytes) << ")\n";
  return 0;
}

int runRun(const RunFlags& flags) {
  if (flags.device != "cpu") return reportError(Status::usage("--device cuda: not built yet (see issue 7)"));
  if (flags.backend != "local")
    return reportError(Status::usage("--backend " + flags.backend + ": not built yet (see issues 6 and 7)"));
  if (!flags.trace.empty()) return reportError(Status::usage("--trace: not built yet (see issue 5)"));
  auto plan = readPlanFile(flags.plan);
  if (!plan) return reportError(plan.status());
  auto device = runtime::createDevice(flags.device);
  if (!device) return reportError(device.status());
  runtime::ExecutorOptions executor_options;
  executor_options.threads = flags.threads;
  auto executor = runtime::createSingleDeviceExecutor(**plan, **device, executor_options);
  if (!executor) return reportError(executor.status());
  runtime::RankExecutor& exec = **executor;

  // Inference: .npy in, .npy out.
  if (!flags.inputs.empty()) {
    if (!exec.hasProgram("infer"))
      return reportError(Status::badInput(flags.plan + " is a training plan; --inputs needs an inference plan "
                                                       "(cleave compile without --train)"));
    Status ready = flags.checkpoint_dir.empty() ? exec.initializeParameters()
                                                : runtime::loadLatestCheckpoint(flags.checkpoint_dir, exec).status();
    if (!ready) return reportError(ready);
    auto written = runtime::runInference(exec, flags.inputs, flags.outputs);
    if (!written) return reportError(written.status());
    for (const auto& path : *written) std::cout << "wrote " << path << "\n";
    return 0;
  }

  if (!exec.hasProgram("train"))
    return reportError(Status::badInput(flags.plan + " is an inference plan; run it with --inputs DIR --outputs DIR"));
  runtime::TrainOptions options;
  options.data = flags.data.empty() ? "fashion-mnist" : flags.data;
  options.steps = flags.steps;
  options.epochs = flags.steps == 0 && flags.epochs == 0 ? 1 : flags.epochs;
  options.eval_data = flags.eval_data;
  options.metrics_path = flags.metrics;
  options.checkpoint_dir = flags.checkpoint_dir;
  options.checkpoint_every = flags.checkpoint_every;
  options.resume = flags.resume;
  options.seed = static_cast<uint64_t>(flags.seed);
  options.threads = flags.threads;
  options.progress = flags.progress == "always" ? runtime::ProgressMode::kAlways
                     : flags.progress == "never" ? runtime::ProgressMode::kNever
                                                 : runtime::ProgressMode::kAuto;
  runtime::TrainReport report;
  Status trained = runtime::train(exec, **plan, options, report);
  if (!trained) return reportError(trained);

  MemoryReport memory = memoryReport((*plan)->ranks(0));
  std::printf("trained steps %lld..%lld in %.1f s: %.1f samples/s, final loss %.4f\n",
              static_cast<long long>(report.start_step), static_cast<long long>(report.steps), report.train_seconds,
              report.samples_per_s, report.final_loss);
  if (report.final_eval) {
    const auto& eval = *report.final_eval;
    if (eval.accuracy)
      std::printf("eval accuracy: %.4f on %lld samples%s\n", *eval.accuracy, static_cast<long long>(eval.samples),
                  eval.loss ? (" (loss " + std::to_string(*eval.loss) + ")").c_str() : "");
  }
  std::printf("peak memory: %s arena = parameters %s + optimizer state %s + gradients/activations %s\n",
              mib(report.peak_arena_bytes).c_str(), mib(memory.param_bytes).c_str(),
              mib(memory.optimizer_state_bytes).c_str(), mib(memory.activation_region_bytes).c_str());
  if (!report.last_checkpoint.empty()) std::printf("checkpoint: %s\n", report.last_checkpoint.c_str());
  return 0;
}

int runInspectPlan(const InspectPlanFlags& flags) {
  auto plan = readPlanFile(flags.path);
  if (!plan) return reportError(plan.status());
  const planpb::Plan& p = **plan;
  if (flags.rank >= p.ranks_size())
    return reportError(Status::badInput("--rank " + std::to_string(flags.rank) + ": " + flags.path + " has " +
                                        std::to_string(p.ranks_size()) + " rank(s)"));
  nlohmann::ordered_json json;
  json["plan"] = flags.path;
  json["model"] = p.model_name();
  json["devices"] = p.devices();
  json["global_batch"] = p.global_batch();
  json["strategy"] = {{"dp", p.strategy().dp()},
                      {"tp", p.strategy().tp()},
                      {"pp", p.strategy().pp()},
                      {"microbatches", p.strategy().microbatches()},
                      {"schedule", p.strategy().schedule()}};
  if (p.has_training())
    json["training"] = {{"loss", p.training().loss()}, {"optimizer", p.training().optimizer()}};
  json["ranks"] = nlohmann::ordered_json::array();
  std::ostringstream text;
  text << flags.path << ": model @" << p.model_name() << ", " << p.devices() << " device(s), dp " << p.strategy().dp()
       << " x tp " << p.strategy().tp() << " x pp " << p.strategy().pp() << ", batch " << p.global_batch() << "\n";
  text << "rank stage instructions   peak      params    grads     optimizer activations comm\n";
  for (const auto& rank : p.ranks()) {
    if (flags.rank >= 0 && rank.rank() != flags.rank) continue;
    MemoryReport memory = memoryReport(rank);
    RankCounts counts = countRank(rank);
    int64_t peak = 0;
    for (const auto& program : rank.programs()) peak = std::max<int64_t>(peak, program.peak_bytes());
    nlohmann::ordered_json programs = nlohmann::ordered_json::array();
    for (const auto& program : rank.programs())
      programs.push_back({{"name", program.name()},
                          {"instructions", program.instructions_size()},
                          {"peak_memory_bytes", program.peak_bytes()}});
    json["ranks"].push_back({{"rank", rank.rank()},
                             {"stage", rank.stage()},
                             {"instructions", counts.instructions},
                             {"peak_memory_bytes", peak},
                             {"param_bytes", memory.param_bytes},
                             {"grad_bytes", memory.gradient_bytes},
                             {"optimizer_state_bytes", memory.optimizer_state_bytes},
                             {"activation_bytes", memory.activation_region_bytes},
                             {"comm_bytes", counts.comm_bytes},
                             {"programs", programs}});
    char line[256];
    std::snprintf(line, sizeof line, "%-4d %-5d %-13lld %-9s %-9s %-9s %-9s %-11s %lld\n", rank.rank(), rank.stage(),
                  static_cast<long long>(counts.instructions), mib(peak).c_str(), mib(memory.param_bytes).c_str(),
                  mib(memory.gradient_bytes).c_str(), mib(memory.optimizer_state_bytes).c_str(),
                  mib(memory.activation_region_bytes).c_str(), static_cast<long long>(counts.comm_bytes));
    text << line;
  }
  Status written = writeOutput("", flags.json ? json.dump(2) + "\n" : text.str());
  return written.isOk() ? 0 : reportError(written);
}

}  // namespace cleave::cli
