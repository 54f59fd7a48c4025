// The channels-last pass: NHWC convolutions and max pools (see passes/layout/channels_last.h).
#include "passes/core/pass_manager.h"
#include "passes/layout/channels_last.h"

namespace cleave {
namespace {

Status convert(Graph& graph, const PassOptions&) { return convertToChannelsLast(graph).status(); }

}  // namespace

PassInfo makeChannelsLastPass() {
  return PassInfo{
      .name = "channels-last",
      .summary = "in a graph that does not train, conv2d and max_pool2d read and write NHWC images, with "
                 "transposes only where NCHW values enter or leave their region",
      .options = {},
      .run = convert,
  };
}

}  // namespace cleave
