// Training loop: steps of a plan's "train" program over a data source, with metrics, evaluation,
// checkpoints and a progress bar.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/lr_schedule.h"
#include "ir/plan.pb.h"
#include "runtime/train/checkpoint.h"
#include "runtime/io/data_source.h"
#include "runtime/device/element_access.h"
#include "runtime/exec/execution_trace.h"
#include "runtime/io/file_io.h"
#include "runtime/train/progress_bar.h"
#include "runtime/train/stop_signals.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The scalar loss (or another scalar output, the gradient norm) from the train program's output.
Expected<double> readLoss(Device& device, const TensorView& loss) {
  if (loss.type.numel() != 1)
    return Status::badInput("the loss output is " + loss.type.str() + ", not a scalar");
  uint8_t bytes[8] = {};
  CLEAVE_TRY(device.copyToHost(bytes, loss.data, dtypeSize(loss.type.dtype)));
  return loadElement(loss.type.dtype, bytes, 0);
}

std::string evalSummary(const EvalRecord& record) {
  char text[160];
  std::string where = record.epoch > 0 ? "epoch " + std::to_string(record.epoch) + " (step " +
                                             std::to_string(record.step) + ")"
                                       : "step " + std::to_string(record.step);
  std::string scores;
  if (record.result.accuracy) {
    std::snprintf(text, sizeof text, "accuracy %.4f", *record.result.accuracy);
    scores += text;
  }
  if (record.result.top5_accuracy) {
    std::snprintf(text, sizeof text, ", top-5 %.4f", *record.result.top5_accuracy);
    scores += text;
  }
  if (record.result.loss) {
    std::snprintf(text, sizeof text, "%sloss %.4f", scores.empty() ? "" : ", ", *record.result.loss);
    scores += text;
  }
  if (record.result.perplexity) {
    std::snprintf(text, sizeof text, ", perplexity %.3f", *record.result.perplexity);
    scores += text;
  }
  return where + ": eval " + scores + " over " + std::to_string(record.result.samples) + " samples";
}

// Keeps the lines of a metrics file up to step `last_step`: a resumed run redoes the steps after its
// checkpoint, so their lines (and a line cut short by a crash) are dropped to list each step once.
Status trimMetrics(const std::string& path, int64_t last_step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::ok();
  CLEAVE_ASSIGN_OR_RETURN(std::string contents, readWholeFile(path));
  std::istringstream lines(contents);
  std::string line, kept;
  while (std::getline(lines, line)) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= last_step)
      kept += line + "\n";
  }
  return writeFileAtomically(path, [&](FileWriter& out) { return out.write(kept); });
}

// The run's checks and sources, set up before the first step.
struct TrainSetup {
  TensorView loss;
  Device* loss_device = nullptr;  // the device of the rank the loss is read from (null in other processes)
  int loss_rank = 0;              // that rank: the lowest of the plan that outputs the loss
  bool reports_loss = true;       // false in the processes of a multi-process run that never see the loss
  std::unique_ptr<GlobalBatch> train_batch;
  std::unique_ptr<DataSource> train_source;
  std::unique_ptr<GlobalBatch> eval_batch;
  std::unique_ptr<DataSource> eval_source;
  int64_t total_steps = 0;
  CheckpointState start;
  double base_lr = 0;            // the optimizer's lr, times the schedule's factor each step
  LrSchedule schedule;
  TensorView grad_norm;          // with clipping: the global gradient norm (every rank outputs it)
  Device* grad_norm_device = nullptr;
};

// The lowest rank of `plan` whose `program` outputs `name`; kBadInput when none does.
Expected<int> lowestRankWithOutput(const planpb::Plan& plan, std::string_view program, const std::string& name) {
  int lowest = -1;
  for (const planpb::RankPlan& rank : plan.ranks())
    for (const planpb::Program& proto : rank.programs())
      if (proto.name() == program)
        for (const planpb::NamedBuffer& output : proto.outputs())
          if (output.name() == name && (lowest < 0 || rank.rank() < lowest)) lowest = rank.rank();
  if (lowest < 0)
    return Status::badInput("no rank's program '" + std::string(program) + "' outputs '" + name + "'");
  return lowest;
}

// The step's loss where it is reported: read on the loss rank and, in a multi-process run, passed to
// rank 0 (an all-gather over the two); NaN in the processes that do not report it.
Expected<double> stepLoss(RankGroup& group, const TrainSetup& setup) {
  double loss = NAN;
  if (setup.loss_device) {
    CLEAVE_ASSIGN_OR_RETURN(loss, readLoss(*setup.loss_device, setup.loss));
  }
  if (!group.spansProcesses() || setup.loss_rank == 0 || !setup.reports_loss) return loss;
  double both[2] = {};
  const int pair[2] = {0, setup.loss_rank};
  TensorView mine{&loss, TensorType{DType::kF64, {1}}}, gathered{both, TensorType{DType::kF64, {2}}};
  CLEAVE_TRY(group.processCommunicator().allGather(pair, mine, gathered, 0));
  return both[1];
}

// Steps: check the plan and options, resume or initialize, open the sources, count the steps.
Expected<TrainSetup> setUp(RankGroup& group, const planpb::Plan& plan, const TrainOptions& options,
                           TrainReport& report) {
  // 1. The plan must be a training plan; the options must say how long to train.
  const planpb::Training& training = plan.training();
  if (!plan.has_training() || training.loss_output().empty())
    return Status::usage("the plan is not a training plan (compile it with --train)");
  TrainSetup setup;
  if (group.spansProcesses()) {
    // The loss rank's process reads the loss and passes it to rank 0, which reports it.
    CLEAVE_ASSIGN_OR_RETURN(setup.loss_rank, lowestRankWithOutput(plan, "train", training.loss_output()));
    RankExecutor& own = group.executor(0);
    if (own.rank() == setup.loss_rank) {
      CLEAVE_ASSIGN_OR_RETURN(setup.loss, own.output("train", training.loss_output()));
      setup.loss_device = &own.device();
    }
    setup.reports_loss = own.rank() == 0 || own.rank() == setup.loss_rank;
  } else {
    CLEAVE_ASSIGN_OR_RETURN(auto loss, group.firstOutput("train", training.loss_output()));
    setup.loss_device = &loss.first->device();
    setup.loss = loss.second;
  }
  // The learning rate and gradient norm each step reports.
  auto lr = training.optimizer_args().find("lr");
  setup.base_lr = lr == training.optimizer_args().end() ? NAN : lr->second;
  if (!training.lr_schedule().empty()) {
    auto schedule = parseLrSchedule(training.lr_schedule());
    if (!schedule) return schedule.status().withContext("the plan's training record: ");
    setup.schedule = *schedule;
  }
  if (!training.grad_norm_output().empty()) {
    if (group.spansProcesses()) {
      CLEAVE_ASSIGN_OR_RETURN(setup.grad_norm, group.executor(0).output("train", training.grad_norm_output()));
      setup.grad_norm_device = &group.executor(0).device();
    } else {
      CLEAVE_ASSIGN_OR_RETURN(auto norm, group.firstOutput("train", training.grad_norm_output()));
      setup.grad_norm_device = &norm.first->device();
      setup.grad_norm = norm.second;
    }
  }
  CLEAVE_ASSIGN_OR_RETURN(setup.train_batch, GlobalBatch::create(group, "train"));
  if (options.steps < 0 || options.epochs < 0 || options.checkpoint_every < 0)
    return Status::usage("--steps, --epochs and --checkpoint-every cannot be negative");
  if (options.steps == 0 && options.epochs == 0) return Status::usage("give the number of --steps or --epochs");
  if (options.resume && options.checkpoint_dir.empty()) return Status::usage("--resume needs --checkpoint-dir");
  if (options.threads > 0) group.setThreads(options.threads);

  // 2. Weights: from the latest checkpoint when resuming, else from the initializers.
  setup.start.seed = options.seed;
  if (options.resume) {
    auto latest = latestCheckpointPath(options.checkpoint_dir);
    if (!latest) return latest.status().withContext("--resume: ");
    report.resumed_from = *latest;
    CLEAVE_ASSIGN_OR_RETURN(setup.start, loadLatestCheckpoint(options.checkpoint_dir, group));
  } else {
    CLEAVE_TRY(group.initializeParameters());
  }
  report.start_step = setup.start.step;

  // 3. Sources: training data at the saved position; evaluation data bound to "eval".
  DataSourceOptions train_options{DataSplit::kTrain, setup.start.seed, training.labels_input()};
  CLEAVE_ASSIGN_OR_RETURN(setup.train_source,
                          openDataSource(options.data, setup.train_batch->inputs(), train_options));
  CLEAVE_TRY(setup.train_source->seek(setup.start.position));
  if (!options.eval_data.empty()) {
    CLEAVE_ASSIGN_OR_RETURN(setup.eval_batch, GlobalBatch::create(group, "eval"));
    DataSourceOptions eval_options{DataSplit::kEval, setup.start.seed, training.labels_input()};
    CLEAVE_ASSIGN_OR_RETURN(setup.eval_source,
                            openDataSource(options.eval_data, setup.eval_batch->inputs(), eval_options));
  }

  // 4. Length: steps, or epochs of a finite source.
  int64_t per_epoch = setup.train_source->batchesPerEpoch();
  if (options.steps > 0) {
    setup.total_steps = options.steps;
  } else if (per_epoch == 0) {
    return Status::usage("--epochs needs a finite data set; " + setup.train_source->description() +
                         " is endless: give --steps");
  } else {
    setup.total_steps = options.epochs * per_epoch;
  }
  // Steps count from the start of training, so a resumed run must ask for more than it has done.
  if (setup.start.step >= setup.total_steps) {
    std::string asked = options.steps > 0 ? "--steps " + std::to_string(options.steps)
                                          : "--epochs " + std::to_string(options.epochs) + " (" +
                                                std::to_string(setup.total_steps) + " steps)";
    return Status::usage(asked + " leaves nothing to train: the checkpoint '" + report.resumed_from +
                         "' is at step " + std::to_string(setup.start.step) +
                         " already (steps count from the start of training); give more");
  }
  return setup;
}

}  // namespace

// Steps: set up, then per step: fill, run, read the loss, evaluate and checkpoint when due, record;
// finally evaluate once more unless the last step just did.
Status train(RankGroup& group, const planpb::Plan& plan, const TrainOptions& options, TrainReport& report) {
  report = TrainReport{};
  report.final_loss = NAN;
  report.rank_arena_bytes = group.arenaBytes();
  report.peak_arena_bytes = *std::max_element(report.rank_arena_bytes.begin(), report.rank_arena_bytes.end());
  CLEAVE_ASSIGN_OR_RETURN(TrainSetup setup, setUp(group, plan, options, report));
  DataSource& source = *setup.train_source;
  report.steps = setup.start.step;

  // Metrics: continued when resuming, so the file holds the whole run.
  std::ofstream metrics;
  if (!options.metrics_path.empty()) {
    bool resumed = !report.resumed_from.empty();
    if (resumed) CLEAVE_TRY(trimMetrics(options.metrics_path, setup.start.step));
    metrics.open(options.metrics_path, resumed ? std::ios::app : std::ios::trunc);
    if (!metrics) return Status::badInput("cannot write metrics file '" + options.metrics_path + "'");
  }
  bool show_progress = options.progress == ProgressMode::kAlways ||
                       (options.progress == ProgressMode::kAuto && stderrIsTerminal());
  ProgressBar progress(setup.start.step, setup.total_steps, show_progress);

  auto runEvaluation = [&](int64_t step, int64_t epoch) -> Status {
    CLEAVE_ASSIGN_OR_RETURN(EvalResult result, evaluate(group, plan, *setup.eval_batch, *setup.eval_source));
    EvalRecord record{step, epoch, result};
    report.evals.push_back(record);
    report.final_eval = result;
    if (options.print_summaries) progress.printLine(evalSummary(record));
    return Status::ok();
  };
  auto saveAt = [&](int64_t step) -> Status {
    CheckpointState state{step, source.position(), setup.start.seed};
    CLEAVE_ASSIGN_OR_RETURN(report.last_checkpoint, saveCheckpoint(options.checkpoint_dir, group, state));
    return Status::ok();
  };

  // A trace covers steps [first_traced, last_traced]: the first step run warms up, unless it is the only one.
  ExecutionTrace trace;
  const int64_t first_traced = setup.start.step + (setup.total_steps - setup.start.step > 1 ? 2 : 1);
  const int64_t last_traced = first_traced + options.trace_steps - 1;
  auto traceStep = [&](int64_t step) {
    if (options.trace_path.empty()) return;
    trace.setStep(step);
    ExecutionTrace* recording = step >= first_traced && step <= last_traced ? &trace : nullptr;
    for (int r = 0; r < group.size(); ++r) group.executor(r).setTrace(recording);
  };

  Clock::time_point run_start = Clock::now();
  int64_t samples = 0;
  bool evaluated_last = false;
  for (int64_t step = setup.start.step + 1; step <= setup.total_steps; ++step) {
    // 1. One optimizer step.
    int64_t epoch = source.position().epoch + 1;
    Clock::time_point step_start = Clock::now();
    CLEAVE_ASSIGN_OR_RETURN(int64_t rows, source.next());
    CLEAVE_TRY(setup.train_batch->scatter());
    traceStep(step);
    CLEAVE_TRY(group.run("train"));
    CLEAVE_ASSIGN_OR_RETURN(double loss, stepLoss(group, setup));
    double grad_norm = NAN;
    if (setup.grad_norm_device) {
      CLEAVE_ASSIGN_OR_RETURN(grad_norm, readLoss(*setup.grad_norm_device, setup.grad_norm));
    }
    double step_seconds = secondsBetween(step_start, Clock::now());
    report.train_seconds += step_seconds;
    samples += rows;
    report.steps = step;
    report.final_loss = loss;
    if (setup.reports_loss && !std::isfinite(loss)) {
      progress.finish();
      return Status::runtime("step " + std::to_string(step) + ": the loss is " + std::to_string(loss) +
                             "; training stopped (try a lower learning rate)" +
                             (report.last_checkpoint.empty() ? "" : "; last checkpoint: " + report.last_checkpoint));
    }

    // 2. At an epoch's end (the source moved to a new epoch): evaluate.
    bool epoch_done = source.batchesPerEpoch() > 0 && source.position().batch == 0;
    evaluated_last = false;
    if (epoch_done && setup.eval_source) {
      CLEAVE_TRY(runEvaluation(step, epoch));
      evaluated_last = true;
    }

    // 3. The step's metrics line (with the evaluation's scores when one just ran), flushed.
    double samples_per_s = step_seconds > 0 ? static_cast<double>(rows) / step_seconds : 0.0;
    if (metrics.is_open()) {
      nlohmann::json line = {{"step", step},
                             {"loss", loss},
                             {"samples_per_s", samples_per_s},
                             {"epoch", epoch},
                             {"elapsed_s", secondsBetween(run_start, Clock::now())},
                             {"lr", setup.base_lr * setup.schedule.factor(step - 1)}};
      if (setup.grad_norm_device) line["grad_norm"] = grad_norm;
      if (evaluated_last && report.final_eval->accuracy) line["eval_accuracy"] = *report.final_eval->accuracy;
      if (evaluated_last && report.final_eval->loss) line["eval_loss"] = *report.final_eval->loss;
      if (evaluated_last && report.final_eval->top5_accuracy) line["eval_top5_accuracy"] = *report.final_eval->top5_accuracy;
      if (evaluated_last && !report.final_eval->class_accuracy.empty()) {
        nlohmann::json classes = nlohmann::json::array();
        for (double accuracy : report.final_eval->class_accuracy)
          classes.push_back(std::isnan(accuracy) ? nlohmann::json(nullptr) : nlohmann::json(accuracy));
        line["eval_class_accuracy"] = std::move(classes);
      }
      if (evaluated_last && report.final_eval->perplexity) line["eval_perplexity"] = *report.final_eval->perplexity;
      metrics << line.dump() << "\n";
      metrics.flush();
      if (!metrics) return Status::runtime("cannot write metrics file '" + options.metrics_path + "'");
    }
    progress.update(step, loss, report.train_seconds > 0 ? static_cast<double>(samples) / report.train_seconds : 0.0);

    // 4. Checkpoint: every N steps, or at each epoch's end; always after the last step.
    bool due = options.checkpoint_every > 0 ? step % options.checkpoint_every == 0 : epoch_done;
    if (!options.checkpoint_dir.empty() && (due || step == setup.total_steps)) CLEAVE_TRY(saveAt(step));

    // 5. SIGTERM or SIGINT (caught in a run of one process): checkpoint unless this step just did, and stop.
    if (!group.spansProcesses() && stopSignal() != 0 && step < setup.total_steps) {
      report.stop_signal = stopSignal();
      if (!options.checkpoint_dir.empty() && report.last_checkpoint != checkpointPath(options.checkpoint_dir, step))
        CLEAVE_TRY(saveAt(step));
      break;
    }
  }
  progress.finish();
  if (!options.trace_path.empty()) {
    for (int r = 0; r < group.size(); ++r) group.executor(r).setTrace(nullptr);
    CLEAVE_TRY(trace.write(options.trace_path));
  }

  // 6. A final evaluation unless the last step's epoch end just had one (or a signal stopped the run).
  if (setup.eval_source && !evaluated_last && report.stop_signal == 0) CLEAVE_TRY(runEvaluation(report.steps, 0));
  report.samples_per_s = report.train_seconds > 0 ? static_cast<double>(samples) / report.train_seconds : 0.0;
  return Status::ok();
}

Status train(RankExecutor& executor, const planpb::Plan& plan, const TrainOptions& options, TrainReport& report) {
  std::unique_ptr<RankGroup> group = RankGroup::wrap(executor);
  return train(*group, plan, options, report);
}

}  // namespace cleave::runtime
