// The fusion pass's sequence on one graph: bias adds and transposes into matrix products
// (matmul_fusion.h), a softmax cross-entropy with its gradient (loss_fusion.h), a GELU's
// slope computed in the forward pass for its gradient (gelu_slope.h), a clipped gradient's scale
// into its optimizer update and a weight gradient's product into its SGD update (update_fusion.h),
// then elementwise chains (elementwise_fusion.h). The `fusion` pass and the compile pipeline
// (`--fusion on`) both run it; each step leaves a graph without its pattern as it is.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// `node_group`, when not empty, gives each node a group (a pipeline step): nothing fuses across
// groups, and it is updated to the new node list.
Status fuseGraph(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
