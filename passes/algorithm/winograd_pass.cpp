// The winograd pass: 3x3 convolutions of graphs that do not train may use Winograd (see
// passes/algorithm/winograd.h).
#include "passes/algorithm/winograd.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status allow(Graph& graph, const PassOptions&) { return allowWinogradConvolutions(graph).status(); }

}  // namespace

PassInfo makeWinogradPass() {
  return PassInfo{
      .name = "winograd",
      .summary = "in a graph that does not train, 3x3 stride-1 f32 convolutions may be computed with a Winograd "
                 "algorithm where the backend finds it faster (allow_winograd = 1; rounding differs from direct)",
      .options = {},
      .run = allow,
  };
}

}  // namespace cleave
