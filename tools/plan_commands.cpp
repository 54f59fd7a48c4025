// The subcommands that make and use plans: compile and run (inspect is tools/inspect_command.cpp).
#include "tools/plan_commands.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

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
#include "runtime/rank_group.h"
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
  // Every rank of the plan: a CPU device, an executor and a thread each, one local communicator.
  runtime::RankGroupOptions group_options;
  group_options.threads = flags.threads;
  group_options.timeout_seconds = flags.timeout;
  auto created = runtime::RankGroup::create(**plan, group_options);
  if (!created) return reportError(created.status());
  runtime::RankGroup& group = **created;

  // Inference: .npy in, .npy out.
  if (!flags.inputs.empty()) {
    if (!group.hasProgram("infer"))
      return reportError(Status::badInput(flags.plan + " is a training plan; --inputs needs an inference plan "
                                                       "(cleave compile without --train)"));
    Status ready = flags.checkpoint_dir.empty() ? group.initializeParameters()
                                                : runtime::loadLatestCheckpoint(flags.checkpoint_dir, group).status();
    if (!ready) return reportError(ready);
    auto written = runtime::runInference(group, flags.inputs, flags.outputs);
    if (!written) return reportError(written.status());
    for (const auto& path : *written) std::cout << "wrote " << path << "\n";
    return 0;
  }

  if (!group.hasProgram("train"))
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
  Status trained = runtime::train(group, **plan, options, report);
  if (!trained) return reportError(trained);

  // The memory of the rank with the largest arena (the only one of a single-device plan).
  const std::vector<int64_t>& arenas = report.rank_arena_bytes;
  size_t largest = static_cast<size_t>(std::max_element(arenas.begin(), arenas.end()) - arenas.begin());
  const planpb::RankPlan* largest_rank = &(*plan)->ranks(0);
  for (const auto& rank : (*plan)->ranks())
    if (rank.rank() == static_cast<int>(largest)) largest_rank = &rank;
  MemoryReport memory = memoryReport(*largest_rank);
  std::printf("trained steps %lld..%lld in %.1f s: %.1f samples/s, final loss %.4f\n",
              static_cast<long long>(report.start_step), static_cast<long long>(report.steps), report.train_seconds,
              report.samples_per_s, report.final_loss);
  if (report.final_eval) {
    const auto& eval = *report.final_eval;
    if (eval.accuracy)
      std::printf("eval accuracy: %.4f on %lld samples%s\n", *eval.accuracy, static_cast<long long>(eval.samples),
                  eval.loss ? (" (loss " + std::to_string(*eval.loss) + ")").c_str() : "");
  }
  std::string on_rank = group.size() > 1 ? " on rank " + std::to_string(largest) + " (the largest)" : "";
  std::printf("peak memory: %s arena%s = parameters %s + optimizer state %s + gradients/activations %s\n",
              mib(report.peak_arena_bytes).c_str(), on_rank.c_str(), mib(memory.param_bytes).c_str(),
              mib(memory.optimizer_state_bytes).c_str(), mib(memory.activation_region_bytes).c_str());
  if (group.size() > 1) {
    std::string per_rank;
    for (size_t rank = 0; rank < report.rank_arena_bytes.size(); ++rank)
      per_rank += (rank ? ", " : "") + std::to_string(rank) + ": " + mib(report.rank_arena_bytes[rank]);
    std::printf("arena per rank: %s\n", per_rank.c_str());
  }
  if (!report.last_checkpoint.empty()) std::printf("checkpoint: %s\n", report.last_checkpoint.c_str());
  return 0;
}

}  // namespace cleave::cli
