// Training loop: steps of a plan's "train" program over a data source, with metrics, evaluation,
// checkpoints and a progress bar.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/status.h"
#include "runtime/train/evaluation.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/rank_group.h"

namespace cleave {
namespace planpb {
class Plan;
}  // namespace planpb
}  // namespace cleave

namespace cleave::runtime {

// When to draw the progress bar.
enum class ProgressMode { kAuto, kAlways, kNever };  // kAuto: when stderr is a terminal

// What to train on, for how long, and what to record.
struct TrainOptions {
  std::string data = "fashion-mnist";  // data source spec (see openDataSource)
  int64_t steps = 0;                   // total optimizer steps, counting steps before a resume
  int64_t epochs = 0;                  // used when steps is 0: epochs of the training split
  std::string eval_data;               // evaluation source spec; empty: no evaluation
  std::string metrics_path;            // JSON lines, one per step; empty: none
  std::string checkpoint_dir;          // empty: no checkpoints
  int64_t checkpoint_every = 0;        // steps between checkpoints; 0: at each epoch's end and at the end
  bool resume = false;                 // continue from checkpoint_dir/latest (an error when there is none)
  uint64_t seed = 0;                   // data order and synthetic data (a resume uses the checkpoint's)
  int threads = 0;                     // 0: keep the executor's setting
  ProgressMode progress = ProgressMode::kAuto;
  bool print_summaries = true;         // evaluation results on stderr, one line each
  std::string trace_path;              // Chrome trace of every rank's instructions in a few steps; empty: none
  int64_t trace_steps = 3;             // how many steps the trace covers (after the first, a warm-up)
};

// One evaluation during training.
struct EvalRecord {
  int64_t step = 0;
  int64_t epoch = 0;  // 1-based epoch that had just finished (0 at the end of a run mid-epoch)
  EvalResult result;
};

// What a training run did.
struct TrainReport {
  int64_t start_step = 0;      // steps already done before this run (from a resumed checkpoint)
  int64_t steps = 0;           // steps done at the end, counting start_step
  double final_loss = 0;       // loss of the last step (NaN when no step ran)
  double samples_per_s = 0;    // training throughput of this run (evaluation and checkpoints excluded)
  double train_seconds = 0;    // time in training steps
  int64_t peak_arena_bytes = 0;          // the largest rank's arena
  std::vector<int64_t> rank_arena_bytes;  // every rank's arena, by rank
  std::optional<EvalResult> final_eval;  // the last evaluation
  std::vector<EvalRecord> evals;
  std::string last_checkpoint;  // path of the last checkpoint written; empty when none
  std::string resumed_from;     // path of the checkpoint resumed from; empty when none
  int stop_signal = 0;          // SIGTERM or SIGINT when one stopped the run early (catchStopSignals)
};

// Trains: opens the sources, resumes from a checkpoint (or runs the parameter initializers), then
// for each step fills the global batch, gives every rank its rows of the "train" program's inputs,
// runs it on every rank and reads the loss from the lowest rank that outputs it; evaluates with
// "eval" at each epoch's end and at the end when eval data is given; checkpoints as asked.
// A NaN or infinite loss stops the run (kRuntime naming the step). In a run of one process, a
// SIGTERM or SIGINT caught by catchStopSignals() ends it after the current step, with a checkpoint
// when checkpoint_dir is set (report.stop_signal says which).
Status train(RankGroup& group, const planpb::Plan& plan, const TrainOptions& options, TrainReport& report);

// The same on one executor (a single-device plan).
Status train(RankExecutor& executor, const planpb::Plan& plan, const TrainOptions& options, TrainReport& report);

}  // namespace cleave::runtime
