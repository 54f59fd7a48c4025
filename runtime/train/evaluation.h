// Evaluation: runs a plan's "eval" program over a whole split and scores its predictions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/status.h"
#include "runtime/io/data_source.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/rank_group.h"

namespace cleave {
namespace planpb {
class Plan;
}  // namespace planpb
}  // namespace cleave

namespace cleave::runtime {

// Scores over the real (unpadded) rows of a split.
struct EvalResult {
  int64_t samples = 0;             // real rows evaluated
  std::optional<double> accuracy;  // argmax of the logits vs integer labels (classification losses)
  std::optional<double> loss;      // the plan's loss, recomputed from logits and labels of real rows only
  std::optional<double> top5_accuracy;  // the label among the 5 largest logits (classification losses)
  std::vector<double> class_accuracy;   // per class, by label (labels [B] of at most 1000 classes; NaN: none seen)
  std::optional<double> perplexity;     // exp(loss) where the labels are sequences [B, T] (language models)
};

// Runs "eval" on every rank for every batch of `source` (an evaluation split opened on
// batch.inputs(), the group's global batch of "eval") from its start, scoring the logits
// (plan.training().logits_output, assembled from the ranks that output them) against the global
// labels input. For softmax_cross_entropy: accuracy, top-5 accuracy and mean cross-entropy over
// label positions (ignore_index -100 skipped), per-class accuracy for a classifier's labels [B], and
// perplexity for a language model's [B, T]; for mse: the mean squared error.
Expected<EvalResult> evaluate(RankGroup& group, const planpb::Plan& plan, GlobalBatch& batch, DataSource& source);

// The same on one executor, `source` opened on its "eval" inputs.
Expected<EvalResult> evaluate(RankExecutor& executor, const planpb::Plan& plan, DataSource& source);

}  // namespace cleave::runtime
