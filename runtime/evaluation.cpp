// Evaluation: runs a plan's "eval" program over a whole split and scores its predictions.
#include "runtime/evaluation.h"

#include <cmath>
#include <vector>

#include "ir/plan.pb.h"
#include "runtime/element_access.h"

namespace cleave::runtime {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // softmax_cross_entropy's default, as PyTorch's

// The elements of a host tensor as doubles (one conversion serves every dtype).
std::vector<double> asDoubles(const TensorType& type, const void* data) {
  std::vector<double> values(static_cast<size_t>(type.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = loadElement(type.dtype, data, static_cast<int64_t>(i));
  return values;
}

// Running sums over the batches.
struct Totals {
  int64_t samples = 0;
  int64_t positions = 0;  // scored label positions
  int64_t correct = 0;
  double loss_sum = 0;
  int64_t loss_terms = 0;
};

// Scores the first `rows` rows of one batch of class logits [B, ..., C] against labels [B, ...].
Status scoreClassification(const std::vector<double>& logits, const std::vector<double>& labels, int64_t batch,
                           int64_t rows, int64_t classes, Totals& totals) {
  int64_t positions_per_row = static_cast<int64_t>(labels.size()) / batch;
  for (int64_t p = 0; p < rows * positions_per_row; ++p) {
    auto label = static_cast<int64_t>(labels[static_cast<size_t>(p)]);
    if (label == kIgnoreIndex) continue;
    if (label < 0 || label >= classes)
      return Status::badInput("eval: label " + std::to_string(label) + " at position " + std::to_string(p) +
                              " is outside [0, " + std::to_string(classes) + ")");
    const double* row = logits.data() + p * classes;
    int64_t best = 0;
    double max_logit = row[0];
    for (int64_t c = 1; c < classes; ++c) {
      if (row[c] > max_logit) {  // strictly greater: the first maximum wins, as argmax
        max_logit = row[c];
        best = c;
      }
    }
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max_logit);
    totals.loss_sum += max_logit + std::log(sum) - row[label];
    totals.loss_terms += 1;
    totals.correct += best == label ? 1 : 0;
    totals.positions += 1;
  }
  return Status::ok();
}

// Adds the squared errors of the first `rows` rows of one batch.
void scoreSquaredError(const std::vector<double>& predictions, const std::vector<double>& targets, int64_t batch,
                       int64_t rows, Totals& totals) {
  int64_t per_row = static_cast<int64_t>(predictions.size()) / batch;
  for (int64_t i = 0; i < rows * per_row; ++i) {
    double diff = predictions[static_cast<size_t>(i)] - targets[static_cast<size_t>(i)];
    totals.loss_sum += diff * diff;
  }
  totals.loss_terms += rows * per_row;
}

// Checks logits and labels fit the plan's loss.
Status checkTypes(const TensorType& logits_type, const TensorType& labels_type, bool classification) {
  if (logits_type.rank() < 1 || labels_type.rank() < 1 || logits_type.shape[0] != labels_type.shape[0])
    return Status::badInput("eval: logits " + logits_type.str() + " and labels " + labels_type.str() +
                            " do not share a batch dimension");
  int64_t classes = logits_type.shape.back();
  if (classification && (!isInteger(labels_type.dtype) || labels_type.numel() * classes != logits_type.numel()))
    return Status::badInput("eval: logits " + logits_type.str() + " do not fit class labels " + labels_type.str());
  if (!classification && labels_type.shape != logits_type.shape)
    return Status::badInput("eval: predictions " + logits_type.str() + " and targets " + labels_type.str() +
                            " differ in shape");
  return Status::ok();
}

}  // namespace

// Steps: find the labels input, run every batch on every rank, assemble its logits, score its real
// rows, average.
Expected<EvalResult> evaluate(RankGroup& group, const planpb::Plan& plan, GlobalBatch& batch, DataSource& source) {
  // 1. What to read.
  const planpb::Training& training = plan.training();
  if (!plan.has_training() || training.logits_output().empty() || training.labels_input().empty())
    return Status::usage("evaluation needs a training plan (compile with --train): the plan names no logits "
                         "output or labels input");
  CLEAVE_TRY(group.firstOutput("eval", training.logits_output()).status());
  const NamedTensor* labels_input = nullptr;
  for (const NamedTensor& input : batch.inputs())
    if (input.name == training.labels_input()) labels_input = &input;
  if (!labels_input) return Status::badInput("program 'eval' has no input '" + training.labels_input() + "'");
  const TensorType& labels_type = labels_input->view.type;
  bool classification = training.loss() == "softmax_cross_entropy";

  // 2. Every batch of the split, from its start.
  CLEAVE_TRY(source.seek(DataPosition{}));
  Totals totals;
  int64_t batches = source.batchesPerEpoch();
  for (int64_t b = 0; b < batches; ++b) {
    CLEAVE_ASSIGN_OR_RETURN(int64_t rows, source.next());
    CLEAVE_TRY(batch.scatter());
    CLEAVE_TRY(group.run("eval"));
    CLEAVE_ASSIGN_OR_RETURN(HostTensor logits, gatherOutput(group, "eval", training.logits_output()));
    CLEAVE_TRY(checkTypes(logits.type, labels_type, classification));
    std::vector<double> logit_values = asDoubles(logits.type, logits.bytes.data());
    std::vector<double> labels = asDoubles(labels_type, labels_input->view.data);
    int64_t batch_rows = logits.type.shape[0];
    if (classification) {
      CLEAVE_TRY(scoreClassification(logit_values, labels, batch_rows, rows, logits.type.shape.back(), totals));
    } else {
      scoreSquaredError(logit_values, labels, batch_rows, rows, totals);
    }
    totals.samples += rows;
  }

  // 3. Averages.
  EvalResult result;
  result.samples = totals.samples;
  if (classification && totals.positions > 0)
    result.accuracy = static_cast<double>(totals.correct) / static_cast<double>(totals.positions);
  if (totals.loss_terms > 0) result.loss = totals.loss_sum / static_cast<double>(totals.loss_terms);
  return result;
}

Expected<EvalResult> evaluate(RankExecutor& executor, const planpb::Plan& plan, DataSource& source) {
  std::unique_ptr<RankGroup> group = RankGroup::wrap(executor);
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<GlobalBatch> batch, GlobalBatch::create(*group, "eval"));
  return evaluate(*group, plan, *batch, source);
}

}  // namespace cleave::runtime
