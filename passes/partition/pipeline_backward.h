// The backward pass of one pipeline stage: gradients arrive from the next stage and leave for the
// previous one, one message per microbatch and transferred value.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"
#include "passes/partition/pipeline_stages.h"

namespace cleave {

// Appends the backward pass of `graph`, stage `boundary.stage`'s graph after unrollMicrobatches
// with `num_microbatches` (and, when split further, its per-device version). The seeds are: on the
// last stage, output 0 (the loss, a float scalar); on every stage, each sent value whose transfer
// carries a gradient, whose cotangent arrives from the stage it went to through a recv node tagged
// gradientTag(the send's tag). Each received value whose transfer carries a gradient has its
// gradient sent back the same way (zeros when nothing on this stage depends on it through float
// values). Every trainable parameter that a seed depends on gets its gradient, summed over the
// microbatches, named gradientName(parameter). Errors: messages whose tags no transfer of
// `boundary` has, a last stage without a float scalar output 0, and autodiff's errors.
Status appendPipelineBackward(Graph& graph, const StageBoundary& boundary, int num_microbatches);

// Sums the gradient of every parameter `boundary` shares with other stages over those stages: the
// gradient (gradientName(parameter), zeros where this stage's loss does not depend on it) becomes
// an all_reduce over the pipeline axis restricted to the sharing stages, at the end of the graph (after
// every pipeline message, so the stages cannot wait on each other), under the gradient's name.
Status sumSharedGradients(Graph& graph, const StageBoundary& boundary);

}  // namespace cleave
