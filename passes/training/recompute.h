// Activation recomputation: the backward pass computes again the activations it reads instead of
// keeping them from the forward pass, trading compute for memory (Chen et al. 2016, "Training Deep
// Nets with Sublinear Memory Cost"; Megatron-LM's full and selective recomputation).
#pragma once

#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// What is kept from the forward pass for the backward pass.
//  - none: every activation the backward pass reads (the default).
//  - selective: the results of products with a weight (matmul, gemm, conv2d reading a parameter),
//    the layer boundaries that join two activations (residual adds), a layer boundary at least
//    every sqrt(n) forward nodes and the results of collectives and random ops; the cheap,
//    memory-heavy rest (attention's scores and probabilities, activation functions, norms,
//    elementwise ops) is recomputed from them. Megatron-LM's selective recomputation, which keeps
//    its attention core out of memory.
//  - full: only a layer boundary about every sqrt(n) forward nodes, and the results of collectives
//    and random ops; each segment's forward work is done again in the backward pass.
enum class RecomputeMode : uint8_t { kNone, kSelective, kFull };

// "none", "selective" or "full"; anything else is a usage error naming the choices.
Expected<RecomputeMode> parseRecomputeMode(std::string_view text);
std::string_view recomputeModeName(RecomputeMode mode);

// What recomputeActivations did.
struct RecomputeReport {
  std::vector<int32_t> copied_nodes;  // the forward nodes copied (indices before the rewrite), increasing
};

// Rewrites a training graph (forward nodes, then the backward pass; `forward[i]` says which node is
// forward work) so that the backward pass reads only the kept forward values (see RecomputeMode)
// and recomputes the others: each forward node needed is copied (its results named NAME.recomputed)
// just before the first backward node that needs it, reading kept values or other copies. The
// numbers are the same; the planner then frees the released values after their last forward use.
// A layer boundary is a forward value that is, at its point of the forward pass, the only
// activation still to be read by later forward nodes (the residual stream between blocks), not
// counting values read across more than a quarter of the forward pass and 16 nodes (a mask, the
// labels), which are kept. Graph inputs and values that do not depend on them (parameters, constants) are read
// as they are.
Expected<RecomputeReport> recomputeActivations(Graph& graph, RecomputeMode mode, const std::vector<bool>& forward);

// The nodes `roots` need (their ancestors): the forward pass of a training graph whose root is its loss.
std::vector<bool> nodesComputing(const Graph& graph, const std::vector<ValueId>& roots);

}  // namespace cleave
