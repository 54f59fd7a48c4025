// The training pipeline: loss head, autodiff and optimizer over a copy of the model, cleaned by
// scalar constant folding, cse and dce.
#include "passes/training/training_pipeline.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/verifier.h"
#include "passes/training/autodiff.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status runPass(Graph& graph, const std::string& name, const std::vector<std::pair<std::string, std::string>>& set = {}) {
  const PassInfo* pass = findPass(name);
  if (!pass) return Status::internal("training pipeline: pass '" + name + "' is not registered");
  PassOptions options = PassOptions::defaultsFor(*pass);
  for (const auto& [option, value] : set) CLEAVE_TRY(options.setFromText(*pass, option, value));
  CLEAVE_TRY(pass->run(graph, options));
  if (!options.misuse().isOk()) return options.misuse().withContext("training pipeline: pass '" + name + "': ");
  return Status::ok();
}

// Scalars that gradient rules compute from constants (pow's exponent − 1) become constants, which
// fused bodies hold as literals: a pow whose exponent was a computed tensor called powf per element.
Status simplify(Graph& graph) {
  CLEAVE_TRY(runPass(graph, "fold-constants", {{"max-elements", "1"}}));
  CLEAVE_TRY(runPass(graph, "cse"));
  return runPass(graph, "dce");
}

Status checkResult(const Graph& graph, const char* which) {
  Status valid = verifyGraph(graph);
  if (valid) return valid;
  return Status::internal(std::string("training pipeline: the ") + which + " graph is invalid: " + valid.message());
}

// The model with its loss attached; outputs [loss]. `logits` is set to the value the loss reads.
// With `autocast`, the model runs in options.precision (a multi-device compile autocasts each
// device's part after partitioning instead, so that tensor parallelism sees the weights' users).
Expected<Graph> withLoss(const Graph& model, const TrainingOptions& options, ValueId& logits, bool autocast = true) {
  Graph graph = model;
  if (autocast && options.precision == Precision::kBF16) CLEAVE_TRY(autocastToBf16(graph).status());
  CLEAVE_ASSIGN_OR_RETURN(ValueId loss, attachLoss(graph, options.loss, options.logits_output));
  logits = graph.nodes[graph.values[loss].producer].operands[0];
  return graph;
}

Expected<Graph> buildTrainGraph(const Graph& model, const TrainingOptions& options) {
  // 1. Model and loss, simplified before differentiating so the backward pass is small too.
  ValueId logits = kNoValue;
  CLEAVE_ASSIGN_OR_RETURN(Graph graph, withLoss(model, options, logits));
  CLEAVE_TRY(simplify(graph));
  CLEAVE_TRY(appendTrainingStep(graph, options));
  CLEAVE_TRY(checkResult(graph, "train"));
  return graph;
}

Expected<Graph> buildEvalGraph(const Graph& model, const TrainingOptions& options) {
  ValueId logits = kNoValue;
  CLEAVE_ASSIGN_OR_RETURN(Graph graph, withLoss(model, options, logits));
  graph.outputs.insert(graph.outputs.begin(), logits);
  graph.updates.clear();  // evaluation leaves the model's state (running statistics) as it is
  CLEAVE_TRY(simplify(graph));
  CLEAVE_TRY(checkResult(graph, "eval"));
  return graph;
}

}  // namespace

Status appendTrainingStep(Graph& graph, const TrainingOptions& options, const TrainingStepHooks& hooks) {
  // 1. Backward pass. cse and dce run with the gradients as outputs: outputs keep their names, and
  //    plan lowering finds gradients by name (P.grad).
  const std::vector<ValueId> outputs = graph.outputs;
  std::set<std::string> forward_values;  // by name: cse and dce renumber values
  for (const Value& value : graph.values) forward_values.insert(value.name);
  if (hooks.backward) {
    CLEAVE_TRY(hooks.backward(graph));
  } else {
    if (outputs.empty()) return Status::internal("training step: the graph has no loss output");
    CLEAVE_TRY(appendBackward(graph, outputs[0]));
  }
  bool any_gradient = false;
  for (const Param& param : graph.params) {
    ValueId grad = graph.findValue(gradientName(graph.values[param.value].name));
    if (param.trainable && grad != kNoValue) {
      graph.outputs.push_back(grad);
      any_gradient = true;
    }
  }
  CLEAVE_TRY(simplify(graph));
  if (options.recompute != RecomputeMode::kNone) {
    // Forward work: the nodes whose results the forward pass named, and the sends of its values.
    std::vector<bool> forward(graph.nodes.size(), false);
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& node = graph.nodes[i];
      const std::vector<ValueId>& named = node.results.empty() ? node.operands : node.results;
      forward[i] = !named.empty() && std::all_of(named.begin(), named.end(), [&](ValueId v) {
        return forward_values.count(graph.values[v].name) > 0;
      });
    }
    CLEAVE_TRY(recomputeActivations(graph, options.recompute, forward).status());
  }
  if (hooks.after_backward) CLEAVE_TRY(hooks.after_backward(graph));
  // 2. Clipping (every device joins the norm's sum, with or without gradients), the optimizer step;
  //    then the outputs are those given and the norm (the updates keep the rest alive).
  if (options.clip_grad_norm > 0) CLEAVE_TRY(appendGradientClipping(graph, options.clip_grad_norm, hooks.norm_scope));
  if (any_gradient || !hooks.parameters_optional) CLEAVE_TRY(appendOptimizer(graph, options.optimizer));
  ValueId norm = options.clip_grad_norm > 0 ? graph.outputs.back() : kNoValue;
  graph.outputs.resize(outputs.size());
  if (norm != kNoValue) graph.outputs.push_back(norm);
  return runPass(graph, "dce");
}

Expected<Graph> buildLossGraph(const Graph& model, const TrainingOptions& options) {
  CLEAVE_TRY(verifyGraph(model));
  ValueId logits = kNoValue;
  CLEAVE_ASSIGN_OR_RETURN(Graph graph, withLoss(model, options, logits, /*autocast=*/false));
  graph.outputs.push_back(logits);
  CLEAVE_TRY(simplify(graph));
  return graph;
}

Expected<TrainingGraphs> buildTrainingGraphs(const Graph& model, const TrainingOptions& options) {
  CLEAVE_TRY(verifyGraph(model));
  CLEAVE_ASSIGN_OR_RETURN(Graph train, buildTrainGraph(model, options));
  CLEAVE_ASSIGN_OR_RETURN(Graph eval, buildEvalGraph(model, options));
  return TrainingGraphs{std::move(train), std::move(eval)};
}

Expected<Graph> buildInferenceGraph(const Graph& model) {
  CLEAVE_TRY(verifyGraph(model));
  return model;
}

}  // namespace cleave
