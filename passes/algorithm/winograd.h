// Winograd convolutions: where a graph that does not train may compute a 3x3 convolution with a
// Winograd algorithm, which does fewer multiplications and rounds differently.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Sets allow_winograd = 1 on each f32 conv2d and fused_conv2d of `graph` with a 3x3 window, stride
// 1, dilation 1 and one group (the convolutions a Winograd algorithm computes), unless the graph
// trains (the gradients are direct convolutions, and a forward pass that rounds differently from
// them would not be the function they differentiate). The backend then chooses per shape where
// Winograd is faster: oneDNN's F(2x2,3x3) and F(4x4,3x3) on AVX-512, for output planes of 14x14 and
// more (ResNet-18 224x224: 14.2 -> 11.8 ms at one thread); the others keep the direct algorithm.
// Results differ from the direct convolution's by about 1e-5 of the outputs' scale, as they do
// between cuDNN's algorithms. Returns the number of nodes marked.
Expected<int> allowWinogradConvolutions(Graph& graph);

}  // namespace cleave
