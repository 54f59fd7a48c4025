// The unmerge-heads pass: attention over [batch, heads, ...] instead of [batch·heads, ...] (see
// passes/partition/unmerge_heads.h); cleave compile runs it before partitioning under --tp.
#include "passes/core/pass_manager.h"
#include "passes/partition/unmerge_heads.h"

namespace cleave {
namespace {

Status rewrite(Graph& graph, const PassOptions&) { return unmergeHeads(graph).status(); }

}  // namespace

PassInfo makeUnmergeHeadsPass() {
  return PassInfo{
      .name = "unmerge-heads",
      .summary = "values whose dim 0 merges two dims ([a, b, ...] reshaped to [a*b, ...]: batch and heads for BLOOM's "
                 "and DeBERTa's batched products) are computed as [a, b, ...] by the nodes that treat that dim as a "
                 "batch, so --tp keeps the heads split; cleave compile runs it under --tp",
      .options = {},
      .run = rewrite,
  };
}

}  // namespace cleave
