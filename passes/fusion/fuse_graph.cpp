#include "passes/fusion/fuse_graph.h"

#include "passes/fusion/elementwise_fusion.h"
#include "passes/fusion/gelu_slope.h"
#include "passes/fusion/loss_fusion.h"
#include "passes/fusion/matmul_fusion.h"
#include "passes/fusion/update_fusion.h"

namespace cleave {

Status fuseGraph(Graph& graph, std::vector<int64_t>* node_group) {
  CLEAVE_TRY(fuseIntoMatmuls(graph, node_group).status());
  CLEAVE_TRY(fuseLossWithGradient(graph, node_group).status());
  CLEAVE_TRY(computeGeluSlopeInForward(graph, node_group).status());
  CLEAVE_TRY(foldGradientScalesIntoUpdates(graph, node_group).status());
  CLEAVE_TRY(foldWeightGradientsIntoUpdates(graph, node_group).status());
  return fuseElementwise(graph, node_group).status();
}

}  // namespace cleave
