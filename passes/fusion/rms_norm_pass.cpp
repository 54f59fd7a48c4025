// The rms-norm pass: decomposed RMSNorms become rms_norm ops (see passes/fusion/rms_norm.h).
#include "passes/core/pass_manager.h"
#include "passes/fusion/rms_norm.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) { return fuseRmsNorms(graph).status(); }

}  // namespace

PassInfo makeRmsNormPass() {
  return PassInfo{
      .name = "rms-norm",
      .summary = "an RMSNorm written as pow, reduce_mean, add, sqrt, div and two muls (PyTorch's export of Llama's, "
                 "Qwen2's and T5's) becomes one rms_norm, before autodiff, so its gradient is one rms_norm_grad",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
