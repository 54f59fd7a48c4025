// The training pipeline `cleave compile --train` runs: model -> train and eval graphs.
#pragma once

#include <functional>
#include <string>

#include "ir/graph.h"
#include "ir/status.h"
#include "passes/training/autocast.h"
#include "passes/training/gradient_clipping.h"
#include "passes/training/loss_head.h"
#include "passes/training/optimizer.h"
#include "passes/training/recompute.h"

namespace cleave {

// What to train the model with.
struct TrainingOptions {
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::string logits_output;  // the output the loss reads; empty: the model's only float output
  OptimizerSpec optimizer;
  double clip_grad_norm = 0;  // > 0: gradients clipped to this global norm before the optimizer
  Precision precision = Precision::kF32;  // bf16: matmul, gemm and conv2d autocast (autocastToBf16)
  RecomputeMode recompute = RecomputeMode::kNone;  // which activations the backward pass computes again
};

// The graphs of a training job. Both have the model's parameters under the model's names.
struct TrainingGraphs {
  Graph train;  // model + loss + backward + optimizer step; outputs [loss]; updates for every state
  Graph eval;   // model + loss; outputs [logits, loss]
};

// Builds the train and eval graphs of `model` (which must verify): attaches the loss, appends the
// backward pass and the optimizer, and runs cse and dce. Errors name the model node at fault.
Expected<TrainingGraphs> buildTrainingGraphs(const Graph& model, const TrainingOptions& options);

// The model with its loss attached, cse and dce applied: outputs [loss, logits] (the graph a
// multi-device compile partitions before differentiating); in f32 whatever options.precision says
// (each device's part is autocast after partitioning).
Expected<Graph> buildLossGraph(const Graph& model, const TrainingOptions& options);

// How appendTrainingStep differentiates, and what it does before the optimizer.
struct TrainingStepHooks {
  std::function<Status(Graph&)> backward;        // appends the backward pass; empty: of output 0 (the loss)
  std::function<Status(Graph&)> after_backward;  // e.g. gradient bucketing; may be empty
  bool parameters_optional = false;              // a graph without parameter gradients gets no optimizer
                                                 // (a pipeline stage); else that is an error
  GradientNormScope norm_scope;                  // with clipping: this device's part of the global norm
};

// Turns a forward graph (output 0 the scalar loss, or a pipeline stage's graph with its own
// backward hook) into one training step: appends the backward pass, runs cse and dce with the
// parameter gradients kept, recomputes activations as options.recompute says, calls `after_backward`, clips the gradients when asked, appends the
// optimizer, and keeps only the graph's original outputs (and grad_norm when clipping). The train graph of buildTrainingGraphs is built this way.
Status appendTrainingStep(Graph& graph, const TrainingOptions& options, const TrainingStepHooks& hooks = {});

// The inference graph: the model as it is, once it verifies.
Expected<Graph> buildInferenceGraph(const Graph& model);

}  // namespace cleave
