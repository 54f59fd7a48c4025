// The clip-gradients pass: scales the gradients P.grad by their global norm (see passes/training/gradient_clipping.h).
#include "passes/core/pass_manager.h"
#include "passes/training/gradient_clipping.h"

namespace cleave {
namespace {

Status clipGradients(Graph& graph, const PassOptions& options) {
  return appendGradientClipping(graph, options.getFloat("max_norm"));
}

}  // namespace

PassInfo makeClipGradientsPass() {
  return PassInfo{
      .name = "clip-gradients",
      .summary = "scale every gradient P.grad by min(1, max_norm / (norm + 1e-6)), the norm over all of them "
                 "(torch.nn.utils.clip_grad_norm_); the norm becomes output %grad_norm",
      .options = {{"max_norm", 1.0, "the largest global gradient norm kept"}},
      .run = clipGradients,
  };
}

}  // namespace cleave
