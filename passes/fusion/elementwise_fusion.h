// Elementwise fusion: chains of fusable elementwise nodes become one fused node (op `fused`).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// What fuseElementwise did to a graph.
struct FusionReport {
  int fused_nodes = 0;     // fused nodes made
  int nodes_replaced = 0;  // elementwise nodes they replaced
};

// Replaces chains of fusable ops (OpDef::fusable) of one float dtype and result shape by fused
// nodes, in a graph that is final (after autodiff and partitioning: a fusion never crosses a
// collective, which is not fusable). A node joins the chain of the producer of one of its operands
// (the first it may join), or else the chain made last when that chain reads one of its operands
// too (siblings), when it has the chain's result shape, follows the chain's last node (views and
// constants aside) and every other user of the chain's values comes after it; the fused node takes
// the chain's last node's place. Scalar constants become literals of the
// body. A softmax or a layer norm along the last axis (OpDef::fusable_along_last_axis) may end a
// chain, in f32, when the chain is its first operand (a layer norm's scale and bias, one value per
// column, come from outside the chain). A reduce_sum of an f32 chain value over every dim but the
// last (a bias gradient) may join the chain as a column sum when it follows the chain and the value
// it sums is read outside the chain too; only column sums join after it.
// `node_group`, when not empty, gives each node a group (a pipeline step): only nodes of one
// group fuse, and the vector is updated to the new node list. A chain of one node stays as it is
// unless its op is transcendental (8 or more FLOPs per element by its cost rule: exp, erf, gelu, ...).
Expected<FusionReport> fuseElementwise(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
