// The add-optimizer pass: appends one optimizer step after autodiff (see passes/training/optimizer.h).
#include "passes/training/optimizer.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status addOptimizer(Graph& graph, const PassOptions& options) {
  CLEAVE_ASSIGN_OR_RETURN(OptimizerSpec spec, parseOptimizerSpec(options.getString("spec")));
  CLEAVE_ASSIGN_OR_RETURN(spec.schedule, parseLrSchedule(options.getString("schedule")));
  return appendOptimizer(graph, spec);
}

}  // namespace

PassInfo makeAddOptimizerPass() {
  return PassInfo{
      .name = "add-optimizer",
      .summary = "append an optimizer step (sgd_update or adamw_update per parameter with a gradient P.grad, "
                 "state parameters and update lines)",
      .options = {{"spec", std::string("sgd"),
                   "the optimizer as on the command line, keys separated by ';' here: sgd:lr=0.1;momentum=0.9"},
                  {"schedule", std::string("constant"),
                   "the learning-rate schedule as --lr-schedule, keys separated by ';': cosine:warmup=10;total=100"}},
      .run = addOptimizer,
  };
}

}  // namespace cleave
