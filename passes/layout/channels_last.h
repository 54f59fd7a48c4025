// Channels-last layout: the convolutions and max pools of a graph that does not train read and
// write NHWC images, with transposes only where the graph's NCHW values enter or leave.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// What convertToChannelsLast did to a graph.
struct ChannelsLastReport {
  int converted_nodes = 0;  // conv2d and max_pool2d nodes now NHWC
  int transposes = 0;       // transposes left in the graph by the conversion
};

// Rewrites every NCHW conv2d and max_pool2d of `graph` as its NHWC form (ir/ops/image_layout.h),
// between a transpose of its image operand to NHWC and one of its result back to NCHW, then moves
// the back-transposes forward through fusable elementwise ops (relu, add, ...) whose other operands
// are NHWC images of the same shape or single values, and drops transposes that undo each other.
// What is left: a transpose of each NCHW value entering the NHWC region (the model's input) and of
// each value leaving it (into global_avg_pool, a reshape, an output). The result is the same values.
// oneDNN's CPU convolutions read and write NHWC without reordering (ResNet-18 at 224x224 spent 10%
// of its time in those reorders). A graph with gradient ops (one that trains) is left as it is: the
// gradient kernels are NCHW. `node_group`, when not empty, gives each node a group (a pipeline
// step, as for fuseElementwise); a node made by the rewrite takes the group of the node it serves.
Expected<ChannelsLastReport> convertToChannelsLast(Graph& graph, std::vector<int64_t>* node_group = nullptr);

}  // namespace cleave
