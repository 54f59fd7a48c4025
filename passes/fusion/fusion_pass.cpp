// The fusion pass: chains of elementwise ops become fused nodes (see passes/fusion/elementwise_fusion.h).
#include "passes/core/pass_manager.h"
#include "passes/fusion/elementwise_fusion.h"

namespace cleave {
namespace {

Status fuse(Graph& graph, const PassOptions&) { return fuseElementwise(graph).status(); }

}  // namespace

PassInfo makeFusionPass() {
  return PassInfo{
      .name = "fusion",
      .summary = "merge chains of fusable elementwise ops (one float dtype and shape) into fused nodes, scalar "
                 "constants becoming literals of their bodies",
      .options = {},
      .run = fuse,
  };
}

}  // namespace cleave
