// Evaluation: runs a plan's "eval" program over a whole split and scores its predictions.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/status.h"
#include "runtime/data_source.h"
#include "runtime/executor.h"

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
};

// Runs "eval" on every batch of `source` (an evaluation split opened on the eval program's inputs)
// from its start, reading plan.training().logits_output and the labels input. For
// softmax_cross_entropy: accuracy and mean cross-entropy over label positions (ignore_index -100
// skipped); for mse: the mean squared error.
Expected<EvalResult> evaluate(RankExecutor& executor, const planpb::Plan& plan, DataSource& source);

}  // namespace cleave::runtime
