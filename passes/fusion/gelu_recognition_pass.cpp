// The gelu pass: decomposed GELUs become gelu ops (see passes/fusion/gelu_recognition.h).
#include "passes/core/pass_manager.h"
#include "passes/fusion/gelu_recognition.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) { return fuseGelus(graph).status(); }

}  // namespace

PassInfo makeGeluPass() {
  return PassInfo{
      .name = "gelu",
      .summary = "a GELU written as erf or tanh with adds and muls (PyTorch's export below opset 20, Hugging Face's "
                 "gelu_new) becomes one gelu, before autodiff, so its gradient is one gelu_grad",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
