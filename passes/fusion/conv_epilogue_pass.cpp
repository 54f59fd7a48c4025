// The conv-epilogue pass: conv2d + residual add + relu become fused_conv2d (see passes/fusion/conv_epilogue.h).
#include "passes/core/pass_manager.h"
#include "passes/fusion/conv_epilogue.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) { return fuseConvEpilogues(graph).status(); }

}  // namespace

PassInfo makeConvEpiloguePass() {
  return PassInfo{
      .name = "conv-epilogue",
      .summary = "in a graph that does not train, a conv2d with a bias and the residual add and relu that alone read "
                 "its result become one fused_conv2d",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
