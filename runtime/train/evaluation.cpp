// Evaluation: runs a plan's "eval" program over a whole split and scores its predictions.
#include "runtime/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ir/plan.pb.h"
#include "runtime/device/element_access.h"

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
  int64_t correct_top5 = 0;  // the label among the 5 largest logits
  double loss_sum = 0;
  int64_t loss_terms = 0;
  bool sequences = false;    // labels [B, T, ...]: a language model's positions
  std::vector<int64_t> class_positions, class_correct;  // per class (labels [B] only)
};

// At most this many classes get per-class accuracies (more is a vocabulary, not a classifier's classes).
constexpr int64_t kMaxReportedClasses = 1000;

// Scores the first `rows` rows of one batch of class logits [B, ..., C] against labels [B, ...].
Status scoreClassification(const std::vector<double>& logits, const std::vector<double>& labels, int64_t batch,
                           int64_t rows, int64_t classes, Totals& totals) {
  int64_t positions_per_row = static_cast<int64_t>(labels.size()) / batch;
  totals.sequences = totals.sequences || positions_per_row > 1;
  const bool per_class = positions_per_row == 1 && classes <= kMaxReportedClasses;
  if (per_class && totals.class_positions.empty()) {
    totals.class_positions.assign(static_cast<size_t>(classes), 0);
    totals.class_correct.assign(static_cast<size_t>(classes), 0);
  }
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
    // Top 5: fewer than 5 classes rank above the label (a larger logit, or an equal one first, as argmax).
    int64_t above = 0;
    for (int64_t c = 0; c < classes && above < 5; ++c)
      above += row[c] > row[label] || (row[c] == row[label] && c < label) ? 1 : 0;
    totals.correct_top5 += above < 5 ? 1 : 0;
    if (per_class) {
      totals.class_positions[static_cast<size_t>(label)] += 1;
      totals.class_correct[static_cast<size_t>(label)] += best == label ? 1 : 0;
    }
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

// The averages of `totals` over `samples` real rows.
EvalResult averages(const Totals& totals, int64_t samples, bool classification) {
  EvalResult result;
  result.samples = samples;
  if (classification && totals.positions > 0) {
    const auto positions = static_cast<double>(totals.positions);
    result.accuracy = static_cast<double>(totals.correct) / positions;
    result.top5_accuracy = static_cast<double>(totals.correct_top5) / positions;
    for (size_t c = 0; c < totals.class_positions.size(); ++c)
      result.class_accuracy.push_back(totals.class_positions[c] == 0 ? NAN
                                                                      : static_cast<double>(totals.class_correct[c]) /
                                                                            static_cast<double>(totals.class_positions[c]));
  }
  if (totals.loss_terms > 0) result.loss = totals.loss_sum / static_cast<double>(totals.loss_terms);
  if (classification && totals.sequences && result.loss) result.perplexity = std::exp(*result.loss);
  return result;
}

// Rows [begin, end) of the global batch whose logits this process scores.
struct OwnedRows {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t offset = 0;  // the global row where the rank's logits start
};

// The rows of this process's rank's `logits` output that no lower rank of the plan outputs (replicas
// are scored once, by the lowest rank holding them); none when the rank does not output them.
Expected<OwnedRows> ownedRows(const RankGroup& group, const planpb::Plan& plan, const std::string& logits) {
  const int own_rank = group.executor(0).rank();
  OwnedRows owned;
  CLEAVE_ASSIGN_OR_RETURN(std::vector<NamedTensor> own_outputs, describeRankTensors(plan, own_rank, "eval", true));
  for (const NamedTensor& output : own_outputs)
    if (output.name == logits && output.view.type.rank() > 0)
      owned = OwnedRows{output.batch_offset, output.batch_offset + output.view.type.shape[0], output.batch_offset};
  for (int rank = 0; rank < own_rank && owned.begin < owned.end; ++rank) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<NamedTensor> outputs, describeRankTensors(plan, rank, "eval", true));
    for (const NamedTensor& output : outputs) {
      if (output.name != logits || output.view.type.rank() == 0) continue;
      int64_t begin = output.batch_offset, end = begin + output.view.type.shape[0];
      if (begin <= owned.begin && end > owned.begin) owned.begin = std::min(end, owned.end);
      if (begin < owned.end && end >= owned.end) owned.end = std::max(begin, owned.begin);
    }
  }
  return owned;
}

// The last dim of `logits` (the class count), from the first rank of the plan that outputs it.
Expected<int64_t> logitsClassCount(const planpb::Plan& plan, const std::string& logits) {
  for (int rank = 0; rank < plan.ranks_size(); ++rank) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<NamedTensor> outputs, describeRankTensors(plan, rank, "eval", true));
    for (const NamedTensor& output : outputs)
      if (output.name == logits && output.view.type.rank() > 0) return output.view.type.shape.back();
  }
  return Status::badInput("no rank's program 'eval' outputs '" + logits + "'");
}

// evaluate() in one process of a multi-process run: every process runs every batch; each scores the
// rows of the logits it owns against the global labels, and the totals are summed over all ranks
// (rank 0 reports them). The accuracy equals the one-process run's; the mean loss may differ in its
// last bits, the sum running in another order.
Expected<EvalResult> evaluateAcrossProcesses(RankGroup& group, const planpb::Plan& plan, GlobalBatch& batch,
                                             DataSource& source, const NamedTensor& labels_input,
                                             bool classification) {
  // 1. What this process scores.
  const planpb::Training& training = plan.training();
  RankExecutor& executor = group.executor(0);
  CLEAVE_ASSIGN_OR_RETURN(OwnedRows owned, ownedRows(group, plan, training.logits_output()));
  CLEAVE_ASSIGN_OR_RETURN(const int64_t class_count, logitsClassCount(plan, training.logits_output()));
  std::optional<TensorView> logits;
  if (owned.begin < owned.end) {
    CLEAVE_ASSIGN_OR_RETURN(logits, executor.output("eval", training.logits_output()));
  }

  // 2. Every batch of the split, from its start.
  CLEAVE_TRY(source.seek(DataPosition{}));
  Totals totals;
  int64_t samples = 0;
  const TensorType& labels_type = labels_input.view.type;
  for (int64_t b = 0; b < source.batchesPerEpoch(); ++b) {
    CLEAVE_ASSIGN_OR_RETURN(int64_t rows, source.next());
    CLEAVE_TRY(batch.scatter());
    CLEAVE_TRY(group.run("eval"));
    samples += rows;
    const int64_t scored_end = std::min(owned.end, rows);
    if (!logits || owned.begin >= scored_end) continue;
    std::vector<uint8_t> host(static_cast<size_t>(logits->type.bytes()));
    CLEAVE_TRY(executor.device().copyToHost(host.data(), logits->data, logits->type.bytes()));
    std::vector<double> all_logits = asDoubles(logits->type, host.data());
    std::vector<double> labels = asDoubles(labels_type, labels_input.view.data);
    // Rows [owned.begin, scored_end) of the global batch; the rank's logits start at its batch offset.
    const int64_t local_rows = logits->type.shape[0];
    const int64_t logits_per_row = logits->type.numel() / std::max<int64_t>(local_rows, 1);
    const int64_t labels_per_row = labels_type.numel() / std::max<int64_t>(labels_type.shape[0], 1);
    const int64_t first_local_row = owned.begin - owned.offset;
    std::vector<double> row_logits(all_logits.begin() + first_local_row * logits_per_row,
                                   all_logits.begin() + (first_local_row + (scored_end - owned.begin)) * logits_per_row);
    std::vector<double> row_labels(labels.begin() + owned.begin * labels_per_row,
                                   labels.begin() + scored_end * labels_per_row);
    const int64_t count = scored_end - owned.begin;
    if (classification) {
      CLEAVE_TRY(scoreClassification(row_logits, row_labels, count, count, logits->type.shape.back(), totals));
    } else {
      scoreSquaredError(row_logits, row_labels, count, count, totals);
    }
  }

  // 3. Sums over every rank.
  const int ranks = plan.ranks_size();
  std::vector<int> everyone(static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) everyone[static_cast<size_t>(rank)] = rank;
  // Counts, then per-class counts (every process sizes them by the plan's class count), then whether
  // labels are sequences.
  const int64_t classes = classification && labels_type.rank() == 1 && class_count <= kMaxReportedClasses ? class_count : 0;
  if (classes > 0 && totals.class_positions.empty()) {
    totals.class_positions.assign(static_cast<size_t>(classes), 0);
    totals.class_correct.assign(static_cast<size_t>(classes), 0);
  }
  std::vector<double> sums = {static_cast<double>(totals.positions), static_cast<double>(totals.correct),
                              totals.loss_sum, static_cast<double>(totals.loss_terms),
                              static_cast<double>(totals.correct_top5), totals.sequences ? 1.0 : 0.0};
  for (int64_t c = 0; c < classes; ++c) sums.push_back(static_cast<double>(totals.class_positions[static_cast<size_t>(c)]));
  for (int64_t c = 0; c < classes; ++c) sums.push_back(static_cast<double>(totals.class_correct[static_cast<size_t>(c)]));
  TensorView view{sums.data(), TensorType{DType::kF64, {static_cast<int64_t>(sums.size())}}};
  CLEAVE_TRY(group.processCommunicator().allReduce(everyone, {&view, 1}, {&view, 1}, ReduceOp::kSum));
  totals.positions = static_cast<int64_t>(sums[0]);
  totals.correct = static_cast<int64_t>(sums[1]);
  totals.loss_sum = sums[2];
  totals.loss_terms = static_cast<int64_t>(sums[3]);
  totals.correct_top5 = static_cast<int64_t>(sums[4]);
  totals.sequences = sums[5] > 0;
  for (int64_t c = 0; c < classes; ++c) {
    totals.class_positions[static_cast<size_t>(c)] = static_cast<int64_t>(sums[static_cast<size_t>(6 + c)]);
    totals.class_correct[static_cast<size_t>(c)] = static_cast<int64_t>(sums[static_cast<size_t>(6 + classes + c)]);
  }
  return averages(totals, samples, classification);
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
  if (!group.spansProcesses()) CLEAVE_TRY(group.firstOutput("eval", training.logits_output()).status());
  const NamedTensor* labels_input = nullptr;
  for (const NamedTensor& input : batch.inputs())
    if (input.name == training.labels_input()) labels_input = &input;
  if (!labels_input) return Status::badInput("program 'eval' has no input '" + training.labels_input() + "'");
  const TensorType& labels_type = labels_input->view.type;
  bool classification = training.loss() == "softmax_cross_entropy";
  if (group.spansProcesses())
    return evaluateAcrossProcesses(group, plan, batch, source, *labels_input, classification);

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
  return averages(totals, totals.samples, classification);
}

Expected<EvalResult> evaluate(RankExecutor& executor, const planpb::Plan& plan, DataSource& source) {
  std::unique_ptr<RankGroup> group = RankGroup::wrap(executor);
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<GlobalBatch> batch, GlobalBatch::create(*group, "eval"));
  return evaluate(*group, plan, *batch, source);
}

}  // namespace cleave::runtime
