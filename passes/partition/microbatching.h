// Microbatching: a stage graph built for one microbatch, repeated for M microbatches in one graph,
// and the tags its sends and receives carry.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Tags of pipeline messages. extractStage numbers the values crossing stages 0, 1, ... (the
// transfer tag t); microbatch m of M sends transfer t with tag 2·(t·M + m), and the gradient of that
// value comes back with the next odd tag, so every message of a step has its own tag.
int64_t microbatchTag(int64_t transfer_tag, int microbatch, int num_microbatches);
// The tag of the gradient sent back for the forward message tagged `forward_tag`.
int64_t gradientTag(int64_t forward_tag);
// The microbatch / the transfer / the direction a message tag belongs to.
int tagMicrobatch(int64_t tag, int num_microbatches);
int64_t tagTransfer(int64_t tag, int num_microbatches);
bool isGradientTag(int64_t tag);

// Repeats the microbatch computation of `graph` (a stage graph whose inputs have microbatch rows)
// for `num_microbatches` microbatches in one graph:
// - each graph input gets num_microbatches times its rows (dim 0); microbatch m reads rows
//   [m·b, (m+1)·b) through a slice named "<input>.mb<m>";
// - every node depending on an input or a receive is cloned once per microbatch (its results named
//   "<name>.mb<m>"), with the tags of sends and receives set by microbatchTag; nodes depending only on
//   parameters and constants are kept once and shared;
// - each output computed per microbatch is combined under its own name: a float scalar (a loss,
//   a mean over its microbatch) becomes the mean over microbatches, sum / M; any other output is
//   concatenated along dim 0 (rows in microbatch order).
// Tags must be extractStage's transfer tags (this runs once per stage graph). Errors: M < 1, an
// input without a batch dim, a state update computed per microbatch.
Expected<Graph> unrollMicrobatches(const Graph& graph, int num_microbatches);

// Rewrites the sum over microbatches of each trainable parameter's gradient P.grad (autodiff's
// chain add(add(g0, g1), g2)...) to start from zeros: add(add(add(zeros, g0), g1), ...). The zeros
// exist before the first microbatch, so plan lowering keeps the sum in one buffer allocated with the
// weights (each add in place), instead of in microbatch 0's gradient, allocated amid its activations.
Status sumMicrobatchGradientsFromZeros(Graph& graph);

}  // namespace cleave
