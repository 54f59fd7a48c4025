// The autodiff pass: appends the backward pass of a scalar loss and outputs the parameter gradients.
#include "passes/training/autodiff.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

// The value named by option `loss`, or else the graph's only float scalar output.
Expected<ValueId> findLoss(const Graph& graph, const std::string& loss_name) {
  if (!loss_name.empty()) {
    ValueId loss = graph.findValue(loss_name);
    if (loss == kNoValue) return Status::usage("autodiff: option loss names '%" + loss_name + "', which is not a value of the graph");
    return loss;
  }
  std::vector<ValueId> scalars;
  for (ValueId v : graph.outputs)
    if (graph.values[v].type.rank() == 0 && isFloat(graph.values[v].type.dtype)) scalars.push_back(v);
  if (scalars.size() != 1)
    return Status::badInput("autodiff: the graph has " + std::to_string(scalars.size()) +
                            " float scalar outputs; name the loss with the option loss=NAME");
  return scalars[0];
}

Status runAutodiff(Graph& graph, const PassOptions& options) {
  CLEAVE_ASSIGN_OR_RETURN(ValueId loss, findLoss(graph, options.getString("loss")));
  CLEAVE_TRY(appendBackward(graph, loss));
  for (const Param& param : graph.params) {
    ValueId grad = graph.findValue(gradientName(graph.values[param.value].name));
    if (param.trainable && grad != kNoValue) graph.outputs.push_back(grad);
  }
  return Status::ok();
}

}  // namespace

PassInfo makeAutodiffPass() {
  return PassInfo{
      .name = "autodiff",
      .summary = "append the backward pass of a scalar loss; the gradient of each trainable parameter P "
                 "becomes the output P.grad",
      .options = {{"loss", std::string(), "the loss value's name (default: the only float scalar output)"}},
      .run = runAutodiff,
  };
}

}  // namespace cleave
