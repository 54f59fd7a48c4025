// The subcommands that make and use plans: compile and run (inspect is tools/inspect_command.cpp).
#include "tools/plan_commands.h"

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "frontend/onnx/onnx_importer.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/text_format.h"
#include "analysis/cluster_json.h"
#include "passes/core/compile_pipeline.h"
#include "analysis/cost_model.h"
#include "passes/training/loss_head.h"
#include "passes/lowering/memory_planner.h"
#include "passes/training/optimizer.h"
#include "passes/training/embedding_padding.h"
#include "passes/training/parameter_freezing.h"
#include "analysis/plan_prediction.h"
#include "passes/partition/strategy_choice.h"
#include "passes/partition/strategy_search.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/stop_signals.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/inference.h"
#include "runtime/exec/rank_group.h"
#include "runtime/train/trainer.h"
#include "tools/allocator_tuning.h"
#include "tools/cli_common.h"
#include "tools/units_text.h"

namespace cleave::cli {
namespace {

// The model at `path`: cleave text IR, or ONNX imported at `batch` and `seq_len`.
Expected<Graph> readModel(const std::string& path, int64_t batch, int64_t seq_len) {
  if (endsWith(path, ".onnx")) {
    OnnxImportOptions options;
    options.batch = batch;
    options.seq_len = seq_len;
    return importOnnxModel(path, options);
  }
  if (!endsWith(path, ".cir"))
    return Status::badInput("cannot compile '" + path + "': expected a model file (.cir or .onnx)");
  return loadGraphFile(path);
}

// What --freeze and --padding-idx change in the model, each time it is read.
struct ModelEdits {
  std::vector<std::string> frozen;         // globs on parameter names
  std::vector<EmbeddingPadding> paddings;  // embedding tables and their padding rows
};

// The model read, with `edits` applied.
Expected<Graph> loadModel(const std::string& path, int64_t batch, int64_t seq_len, const ModelEdits& edits) {
  CLEAVE_ASSIGN_OR_RETURN(Graph model, readModel(path, batch, seq_len));
  if (!edits.frozen.empty()) CLEAVE_TRY(freezeParameters(model, edits.frozen).status().withContext(path + ": "));
  if (!edits.paddings.empty()) CLEAVE_TRY(setEmbeddingPadding(model, edits.paddings).status().withContext(path + ": "));
  return model;
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

std::string millis(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", seconds * 1e3);
  return text;
}

// --strategy auto: the searched strategies, fastest first (the best, then the alternatives), or
// why there are none. Prints the choice and the runners-up.
Expected<StrategySearchResult> searchForCompile(const Graph& model, const CompileFlags& flags, const CompileOptions& options,
                                                const ClusterSpec& cluster) {
  if (flags.devices == 0) return Status::usage("--strategy auto needs --devices N");
  if (flags.dp != 1 || flags.tp != 1 || flags.pp != 1 || flags.microbatches != 1)
    return Status::usage("--strategy auto chooses --dp, --tp, --pp and --microbatches; give only --devices");
  StrategySearchOptions search;
  search.devices = flags.devices;
  search.batch = flags.batch;
  search.model_at_batch = options.model_at_batch;
  search.train = flags.train;
  search.training = options.training;
  search.fusion = options.fusion;
  search.bucket_bytes = options.bucket_bytes;
  search.memory_limit_bytes = options.memory_limit_bytes;
  if (!flags.recompute.empty()) search.recompute_modes = {options.training.recompute};  // as given
  if (flags.zero != 0) search.zero_stages = {flags.zero};
  if (flags.sequence_parallel) search.sequence_parallel = {true};  // as given: where tp > 1
  if (flags.no_sequence_parallel) search.sequence_parallel = {false};
  if (flags.virtual_stages != 1) search.virtual_stages = {flags.virtual_stages};  // as given
  CLEAVE_ASSIGN_OR_RETURN(StrategySearchResult result, searchStrategy(model, search, CostModel(cluster)));
  std::printf("strategy auto on %s: %s, predicted %s per step, %s per device (%lld candidates, %lld estimated, %.2f s)\n",
              cluster.name.c_str(), result.best.strategy.str().c_str(), millis(result.best.step_time_s).c_str(),
              mibText(result.best.memory_bytes).c_str(), static_cast<long long>(result.candidates),
              static_cast<long long>(result.estimated), result.seconds);
  for (const StrategyEstimate& alternative : result.alternatives)
    std::printf("  rejected: %s, predicted %s per step\n", alternative.strategy.str().c_str(),
                millis(alternative.step_time_s).c_str());
  for (const StrategyEstimate& over : result.over_memory)
    std::printf("  rejected: %s, predicted %s per step, %s\n", over.strategy.str().c_str(),
                millis(over.step_time_s).c_str(), over.infeasible.c_str());
  return result;
}

}  // namespace

int runCompile(const CompileFlags& flags, const std::string& producer) {
  keepFreedMemoryForReuse();
  const bool automatic = flags.strategy == "auto";
  int product = flags.dp * flags.tp * flags.pp;
  if (!automatic && flags.devices != 0 && flags.devices != product)
    return reportError(Status::usage("--devices " + std::to_string(flags.devices) + " differs from dp*tp*pp = " +
                                     std::to_string(product)));
  std::optional<ClusterSpec> cluster;
  if (automatic || !flags.cluster.empty()) {
    auto loaded = loadCluster(flags.cluster.empty() ? "cpu-local" : flags.cluster);
    if (!loaded) return reportError(loaded.status());
    cluster = std::move(*loaded);
  }
  if ((!flags.freeze.empty() || !flags.padding_idx.empty()) && !flags.train)
    return reportError(Status::usage(std::string(flags.freeze.empty() ? "--padding-idx" : "--freeze") + " needs --train"));
  ModelEdits edits{flags.freeze, {}};
  for (const std::string& text : flags.padding_idx) {
    auto spec = parseEmbeddingPadding(text);
    if (!spec) return reportError(spec.status());
    edits.paddings.push_back(std::move(*spec));
  }
  auto model = loadModel(flags.model, flags.batch, flags.seq_len, edits);
  if (!model) return reportError(model.status());
  // An ONNX model is imported again for each batch a program sees, so the shape arithmetic its
  // exporter wrote is evaluated at that batch.
  ModelBuilder model_at_batch;
  if (endsWith(flags.model, ".onnx"))
    model_at_batch = [&flags, edits](int64_t batch) { return loadModel(flags.model, batch, flags.seq_len, edits); };

  CompileOptions options;
  options.model_file = flags.model;
  options.producer = producer;
  options.batch = flags.batch;
  options.model_at_batch = model_at_batch;
  options.allow_replicated = flags.allow_replicated;
  options.fusion = flags.fusion == "on";
  options.channels_last = flags.channels_last == "on";
  options.winograd = flags.winograd == "on";
  options.zero = flags.zero;
  options.sequence_parallel = flags.sequence_parallel;
  options.virtual_stages = flags.virtual_stages;
  options.dp = flags.dp;
  options.tp = flags.tp;
  options.pp = flags.pp;
  options.microbatches = flags.microbatches;
  if (flags.grad_accum > 0) {
    if (flags.microbatches != 1 && flags.microbatches != flags.grad_accum)
      return reportError(Status::usage("--grad-accum " + std::to_string(flags.grad_accum) + " and --microbatches " +
                                       std::to_string(flags.microbatches) +
                                       " disagree: both count the microbatches of a step; give one"));
    if (automatic) return reportError(Status::usage("--strategy auto chooses the microbatches; --grad-accum cannot be given with it"));
    options.microbatches = flags.grad_accum;
  }
  options.schedule = flags.schedule;
  options.train = flags.train;
  options.memory_limit_bytes = flags.memory_limit;
  options.cluster = cluster;
  if (flags.train) {
    auto loss = parseLossKind(flags.loss);
    if (!loss) return reportError(loss.status());
    auto optimizer = parseOptimizerSpec(flags.optimizer);
    if (!optimizer) return reportError(optimizer.status());
    options.training.loss = *loss;
    options.training.optimizer = *optimizer;
    if (!flags.lr_schedule.empty()) {
      auto schedule = parseLrSchedule(flags.lr_schedule);
      if (!schedule) return reportError(schedule.status());
      options.training.optimizer.schedule = *schedule;
    }
    if (flags.clip_grad_norm) {
      if (!(*flags.clip_grad_norm > 0) || !std::isfinite(*flags.clip_grad_norm))
        return reportError(Status::usage("--clip-grad-norm must be a finite number > 0, got " + std::to_string(*flags.clip_grad_norm)));
      options.training.clip_grad_norm = *flags.clip_grad_norm;
    }
    if (!flags.precision.empty()) {
      auto precision = parsePrecision(flags.precision);
      if (!precision) return reportError(precision.status());
      options.training.precision = *precision;
    }
    if (!flags.recompute.empty()) {
      auto recompute = parseRecomputeMode(flags.recompute);
      if (!recompute) return reportError(recompute.status());
      options.training.recompute = *recompute;
    }
  } else if (!flags.lr_schedule.empty() || flags.clip_grad_norm || flags.grad_accum > 0 || !flags.precision.empty() ||
             !flags.recompute.empty()) {
    return reportError(Status::usage("--lr-schedule, --clip-grad-norm, --grad-accum, --precision and --recompute need --train"));
  }
  Expected<planpb::Plan> plan = Status::internal("compile: no strategy was compiled");
  if (automatic) {
    // The search's best strategy, or the next ones when a faster one does not compile.
    auto searched = searchForCompile(*model, flags, options, *cluster);
    if (!searched) return reportError(searched.status());
    plan = compileSearchedStrategy(*model, options, *searched, *cluster,
                                   [](const ParallelStrategy& strategy, const Status& error) {
                                     std::fprintf(stderr, "cleave: note: %s did not compile (%s); trying the next strategy\n",
                                                  strategy.str().c_str(), error.message().c_str());
                                   });
  } else {
    plan = compileModel(*model, options);
  }
  if (!plan) return reportError(plan.status());
  Status written = writePlanFile(*plan, flags.output);
  if (!written) return reportError(written);

  const planpb::RankPlan& rank = plan->ranks(0);
  MemoryReport memory = memoryReport(rank);
  std::cout << "wrote " << flags.output << ": " << (flags.train ? "training" : "inference") << " plan, "
            << plan->devices() << " device(s), batch " << plan->global_batch() << ", " << countRank(rank).instructions
            << " instructions, arena " << mibText(memory.arena_bytes) << " (parameters " << mibText(memory.param_bytes)
            << ", optimizer state " << mibText(memory.optimizer_state_bytes) << ")\n";
  if (const std::string frozen = frozenParametersSummary(*model); flags.train && !frozen.empty())
    std::cout << "frozen (no gradient, no optimizer state): " << frozen << "\n";
  if (cluster) {
    auto prediction = predictPlan(*plan, CostModel(*cluster));
    if (!prediction) return reportError(prediction.status().withContext(flags.output + ": "));
    std::cout << "predicted step time on " << cluster->name << ": " << millis(prediction->step_time_s) << " ("
              << prediction->program << ", cleave simulate shows more)\n";
  }
  return 0;
}

runtime::TrainOptions trainOptionsFor(const RunFlags& flags) {
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
  options.trace_path = flags.trace;
  options.progress = flags.progress == "always" ? runtime::ProgressMode::kAlways
                     : flags.progress == "never" ? runtime::ProgressMode::kNever
                                                 : runtime::ProgressMode::kAuto;
  return options;
}

bool startedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

// Steps: check the device and backend go together; hand mpirun jobs to runRunMpi; make the ranks;
// run inference or train, and report.
int runRun(const RunFlags& flags) {
  runtime::routeStopSignalsToOwnThread();
  // 1. The device and backend.
  const bool cuda = flags.device != "cpu";
#if !CLEAVE_HAVE_CUDA
  if (cuda || flags.backend == "nccl")
    return reportError(Status::usage((cuda ? "--device " + flags.device : std::string("--backend nccl")) +
                                     ": this cleave was built without CUDA (nvcc was not found at configure time)"));
#endif
  if (flags.backend == "nccl" && !cuda) return reportError(Status::usage("--backend nccl runs on GPUs: add --device cuda"));
  if (flags.backend == "mpi" && cuda)
    return reportError(Status::usage("--device cuda runs multi-device plans with --backend nccl (under mpirun too)"));
  if (flags.backend == "mpi" || (flags.backend == "nccl" && startedByMpirun())) return runRunMpi(flags);
  auto plan = readPlanFile(flags.plan);
  if (!plan) return reportError(plan.status());

  // 2. Every rank of the plan: a device, an executor and a thread each, connected by local (cpu) or
  //    NCCL (cuda) communicators.
  runtime::RankGroupOptions group_options;
  group_options.threads = flags.threads;
  group_options.timeout_seconds = flags.timeout;
  group_options.stall_seconds = flags.heartbeat;
  group_options.device = flags.device;
  group_options.backend = flags.backend == "nccl" ? runtime::RankBackend::kNccl : runtime::RankBackend::kLocal;
  auto created = runtime::RankGroup::create(**plan, group_options);
  if (!created) return reportError(created.status());
  runtime::RankGroup& group = **created;
  if (cuda)
    for (int rank = 0; rank < group.size(); ++rank)
      std::printf("rank %d on %s\n", rank, group.executor(rank).device().name().c_str());

  // Inference: .npy in, .npy out.
  if (!flags.inputs.empty()) {
    if (!flags.trace.empty())
      return reportError(Status::usage("--trace records training steps; inference runs take no trace yet"));
    if (!group.hasProgram("infer"))
      return reportError(Status::badInput(flags.plan + " is a training plan; --inputs needs an inference plan "
                                                       "(cleave compile without --train), which runs from this "
                                                       "plan's checkpoints with --checkpoint-dir"));
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
  runtime::TrainOptions options = trainOptionsFor(flags);
  runtime::TrainReport report;
  runtime::catchStopSignals();
  Status trained = runtime::train(group, **plan, options, report);
  if (!trained) return reportError(trained);
  if (report.stop_signal != 0) {
    const char* name = report.stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (report.last_checkpoint.empty())
      std::fprintf(stderr, "cleave: stopped by %s after step %lld; no --checkpoint-dir, so nothing was saved\n", name,
                   static_cast<long long>(report.steps));
    else
      std::fprintf(stderr, "cleave: stopped by %s after step %lld; checkpoint: %s (continue with --resume)\n", name,
                   static_cast<long long>(report.steps), report.last_checkpoint.c_str());
    return 128 + report.stop_signal;
  }

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
    if (eval.top5_accuracy) std::printf("eval top-5 accuracy: %.4f\n", *eval.top5_accuracy);
    if (eval.perplexity) std::printf("eval perplexity: %.4f\n", *eval.perplexity);
  }
  std::string on_rank = group.size() > 1 ? " on rank " + std::to_string(largest) + " (the largest)" : "";
  std::printf("peak memory: %s arena%s = parameters %s + optimizer state %s + gradients/activations %s\n",
              mibText(report.peak_arena_bytes).c_str(), on_rank.c_str(), mibText(memory.param_bytes).c_str(),
              mibText(memory.optimizer_state_bytes).c_str(), mibText(memory.activation_region_bytes).c_str());
  if (group.size() > 1) {
    std::string per_rank;
    for (size_t rank = 0; rank < report.rank_arena_bytes.size(); ++rank)
      per_rank += (rank ? ", " : "") + std::to_string(rank) + ": " + mibText(report.rank_arena_bytes[rank]);
    std::printf("arena per rank: %s\n", per_rank.c_str());
  }
  if (!report.last_checkpoint.empty()) std::printf("checkpoint: %s\n", report.last_checkpoint.c_str());
  return 0;
}

}  // namespace cleave::cli
