// The fused-projections pass: a fused QKV as a batched product over its parts (see
// passes/partition/fused_projections.h); cleave compile runs it before partitioning under --tp.
#include "passes/core/pass_manager.h"
#include "passes/partition/fused_projections.h"

namespace cleave {
namespace {

Status rewrite(Graph& graph, const PassOptions& options) {
  return batchFusedProjections(graph, options.getInt("groups")).status();
}

}  // namespace

PassInfo makeFusedProjectionsPass() {
  return PassInfo{
      .name = "fused-projections",
      .summary = "a product with an imported weight [in, parts*out] whose result is split into equal parts (GPT-2's "
                 "fused QKV) becomes a batched product over the weight held as [parts, in, out], so --tp splits "
                 "each part (Megatron's heads); with groups=G, unequal parts are held in G groups of each; cleave "
                 "compile runs it under --tp with groups=tp",
      .options = {{"groups", int64_t{1}, "hold projections cut into unequal parts (grouped-query attention's q, k "
                                         "and v) in this many groups, the tp degree; below 2 they are left alone"}},
      .run = rewrite,
  };
}

}  // namespace cleave
