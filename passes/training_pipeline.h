// The training pipeline `cleave compile --train` runs: model -> train and eval graphs.
#pragma once

#include <string>

#include "ir/graph.h"
#include "ir/status.h"
#include "passes/loss_head.h"
#include "passes/optimizer.h"

namespace cleave {

// What to train the model with.
struct TrainingOptions {
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::string logits_output;  // the output the loss reads; empty: the model's only float output
  OptimizerSpec optimizer;
};

// The graphs of a training job. Both have the model's parameters under the model's names.
struct TrainingGraphs {
  Graph train;  // model + loss + backward + optimizer step; outputs [loss]; updates for every state
  Graph eval;   // model + loss; outputs [logits, loss]
};

// Builds the train and eval graphs of `model` (which must verify): attaches the loss, appends the
// backward pass and the optimizer, and runs cse and dce. Errors name the model node at fault.
Expected<TrainingGraphs> buildTrainingGraphs(const Graph& model, const TrainingOptions& options);

// The inference graph: the model as it is, once it verifies.
Expected<Graph> buildInferenceGraph(const Graph& model);

}  // namespace cleave
