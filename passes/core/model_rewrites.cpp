// The rewrites compile makes to a model before autodiff and partitioning (model_rewrites.h).
#include "passes/core/model_rewrites.h"

#include <string>

#include "passes/core/pass_manager.h"

namespace cleave {

Status rewriteModelForCompile(Graph& graph, bool fusion, int tp) {
  std::string passes = fusion ? "absorb-transposes,rms-norm,gelu" : "absorb-transposes";
  // After dce: a weight's dead readers go first.
  if (tp > 1) passes += ",dce,unmerge-heads,view-chains,fused-projections{groups=" + std::to_string(tp) + "}";
  CLEAVE_ASSIGN_OR_RETURN(Pipeline pipeline, parsePipeline(passes + ",dce"));
  return PassManager(std::move(pipeline)).run(graph);
}

}  // namespace cleave
