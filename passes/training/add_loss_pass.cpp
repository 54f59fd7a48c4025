// The add-loss pass: attaches a training loss to the model's output (see passes/training/loss_head.h).
#include "passes/training/loss_head.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status addLoss(Graph& graph, const PassOptions& options) {
  CLEAVE_ASSIGN_OR_RETURN(LossKind kind, parseLossKind(options.getString("kind")));
  return attachLoss(graph, kind, options.getString("output")).status();
}

}  // namespace

PassInfo makeAddLossPass() {
  return PassInfo{
      .name = "add-loss",
      .summary = "attach a loss to the model output: input %labels and softmax_cross_entropy, or input %targets "
                 "and mse; the loss %loss becomes the only output",
      .options = {{"kind", std::string("softmax_cross_entropy"), "softmax_cross_entropy or mse"},
                  {"output", std::string(), "the output the loss reads (default: the only float output)"}},
      .run = addLoss,
  };
}

}  // namespace cleave
