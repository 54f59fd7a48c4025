// The fusion pass: fuseGraph (passes/fusion/fuse_graph.h) on the graph.
#include "passes/core/pass_manager.h"
#include "passes/fusion/fuse_graph.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) { return fuseGraph(graph); }

}  // namespace

PassInfo makeFusionPass() {
  return PassInfo{
      .name = "fusion",
      .summary = "fold bias adds and transposes into the matmuls around them (fused_matmul), merge a softmax "
                 "cross-entropy and its gradient into one node, compute a gelu's slope in the forward pass for its "
                 "gradient, fold a gradient's scale (clipping) into its optimizer update and a weight gradient's "
                 "matmul into its SGD update (sgd_matmul_update), then chains of fusable elementwise ops (one "
                 "float dtype and shape) into fused nodes, scalar constants becoming literals of their bodies, "
                 "ending in column sums or a total sum, and lone column sums",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
