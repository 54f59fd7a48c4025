// Optimizers as graph ops: parsing --optimizer specs and appending one update per parameter.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ir/lr_schedule.h"
#include "ir/status.h"

namespace cleave {

// The optimizers `cleave compile --train --optimizer` offers.
enum class OptimizerKind { kSgd, kAdamW };

// An optimizer and its hyperparameters. Defaults are PyTorch's, except that SGD's lr (which
// PyTorch requires) defaults to 0.01; weight_decay defaults to 0 for SGD and 0.01 for AdamW.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.01;
  double weight_decay = 0.0;
  // SGD
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // The learning rate at each step: lr times the schedule's factor (--lr-schedule).
  LrSchedule schedule;
};

// Names of the optimizer state (plan lowering classifies buffers by them): the step counter, and
// per parameter P the parameters "P.momentum" (SGD) or "P.exp_avg" and "P.exp_avg_sq" (AdamW).
inline constexpr std::string_view kStepParamName = "step";
inline constexpr std::string_view kMomentumSuffix = ".momentum";
inline constexpr std::string_view kExpAvgSuffix = ".exp_avg";
inline constexpr std::string_view kExpAvgSqSuffix = ".exp_avg_sq";

// Parses "sgd[:key=value,...]" (keys lr, momentum, dampening, weight_decay or wd, nesterov) or
// "adamw[:key=value,...]" (keys lr, beta1, beta2, eps, weight_decay or wd). Keys may also be
// separated by ';' (pass pipelines use ',' between options). Unknown optimizers or keys, bad
// numbers and values PyTorch rejects are usage errors that list the valid choices.
Expected<OptimizerSpec> parseOptimizerSpec(std::string_view text);

// Appends one optimizer step after autodiff: a frozen i64[] parameter `step` (zeros) updated to
// step + 1, and for each trainable parameter P with a gradient P.grad an sgd_update or adamw_update
// node, with its state as frozen zeros parameters, and `update` lines for P and each state.
// Parameters without a gradient are left unchanged (as PyTorch skips them). Errors: no parameter
// has a gradient, or a state name is taken.
Status appendOptimizer(Graph& graph, const OptimizerSpec& spec);

// Whether `node` is one parameter's optimizer update (sgd_update, adamw_update): operand 0 the
// parameter (or the block of it ZeRO updates), operand 1 its gradient.
bool isOptimizerUpdate(const Node& node);

}  // namespace cleave
