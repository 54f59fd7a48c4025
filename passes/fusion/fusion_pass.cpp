// The fusion pass: transposes fold into the matrix products that read or write them
// (passes/fusion/matmul_fusion.h), a softmax cross-entropy and its gradient become one node
// (passes/fusion/loss_fusion.h), an exact GELU keeps its Φ(x) for its gradient
// (passes/fusion/gelu_cdf.h), then chains of elementwise ops become fused nodes
// (passes/fusion/elementwise_fusion.h).
#include "passes/core/pass_manager.h"
#include "passes/fusion/elementwise_fusion.h"
#include "passes/fusion/gelu_cdf.h"
#include "passes/fusion/loss_fusion.h"
#include "passes/fusion/matmul_fusion.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) {
  CLEAVE_TRY(fuseIntoMatmuls(graph).status());
  CLEAVE_TRY(fuseLossWithGradient(graph).status());
  CLEAVE_TRY(shareGeluCdfWithGradient(graph).status());
  return fuseElementwise(graph).status();
}

}  // namespace

PassInfo makeFusionPass() {
  return PassInfo{
      .name = "fusion",
      .summary = "fold bias adds and transposes into the matmuls around them (fused_matmul), merge a softmax "
                 "cross-entropy and its gradient into one node, keep an exact gelu's Phi(x) for its gradient, then "
                 "chains of fusable elementwise ops (one float dtype and shape) into fused nodes, scalar constants "
                 "becoming literals of their bodies",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
