// Attention written over batch·heads as one dim, computed over [batch, heads, ...] instead, so that
// tensor parallelism keeps the heads split through it. BLOOM, DeBERTa-v2 and older exports of BART
// and OPT reshape q, k and v from [B, H, S, D] to [B·H, S, D] for their batched products (torch.bmm,
// baddbmm) and back to [B, H, ...] after. A tp rank holds H/tp heads: its [B, H/tp, S, D] is not
// a block of [B·H, S, D] (its rows are strided), so the partitioner gathered the heads before the
// merge and every rank computed every head's attention.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// From each reshape that merges the two leading dims of its operand ([a, b, t...] -> [a·b, t...],
// its result not read after the nodes), follows the merged value through the nodes that treat its
// dim 0 as a batch dim, and computes them over [a, b, ...]:
//   - the elementwise family (broadcasting), softmax and log_softmax, gather_elements (an axis
//     other than 0), matmul (rank 3 or more), transpose (keeping dim 0 first): their results of
//     the merged rows become [a, b, ...] (axes and permutations moved by one);
//   - a reshape reads the [a, b, ...] form (the same elements in the same order); one keeping dim
//     0 gives [a, b, ...] too, so a reshape back to [a, b, ...] becomes an identity;
// another operand of such a node with dim 0 = a·b (a constant such as BLOOM's ALiBi, DeBERTa's
// tiled relative positions) is reshaped to [a, b, ...], one with dim 0 = 1 to [1, 1, ...]. Any
// other reader (and a result read after the nodes) keeps the merged form: the [a, b, ...] value
// reshaped back for it. The same numbers: only dims are regrouped. The merges left unread are
// removed. Returns the nodes rewritten.
Expected<int> unmergeHeads(Graph& graph);

}  // namespace cleave
