// The rewrites compile makes to a model at its batch, before autodiff and partitioning. The strategy
// search profiles the graph they give, so that it prices what compile builds.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites `graph` in place: transposes a matmul or gemm reads through itself
// (passes/cleanup/absorb_transposes.h); with `fusion`, decomposed RMSNorms and GELUs as rms_norm
// and gelu ops (passes/fusion/rms_norm.h, gelu_recognition.h), which autodiff and the partitioner
// then see as one op; with `tp` > 1, attention over batch·heads computed over [batch, heads, ...]
// (passes/partition/unmerge_heads.h), chains of views as one reshape, transpose and reshape
// (passes/partition/view_chains.h), and fused projections (GPT-2's QKV) as batched products over
// their parts held in tp groups, which the partitioner splits by heads
// (passes/partition/fused_projections.h); and the nodes left unread removed.
Status rewriteModelForCompile(Graph& graph, bool fusion, int tp);

}  // namespace cleave
