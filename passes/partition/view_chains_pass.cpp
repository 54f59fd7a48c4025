// The view-chains pass: chains of views as one reshape, one transpose and one reshape (see
// passes/partition/view_chains.h); cleave compile runs it before partitioning under --tp.
#include "passes/core/pass_manager.h"
#include "passes/partition/view_chains.h"

namespace cleave {
namespace {

Status rewrite(Graph& graph, const PassOptions&) { return canonicalizeViewChains(graph).status(); }

}  // namespace

PassInfo makeViewChainsPass() {
  return PassInfo{
      .name = "view-chains",
      .summary = "chains of two or more views (reshape, squeeze, unsqueeze, transpose) become at most a reshape, a "
                 "transpose and a reshape when that is fewer nodes (nn.MultiheadAttention's [S,B*H,D] round trip "
                 "as [S,B,H,D] moved to [B,H,S,D]), so --tp keeps the heads split; cleave compile runs it under --tp",
      .options = {},
      .run = rewrite,
  };
}

}  // namespace cleave
