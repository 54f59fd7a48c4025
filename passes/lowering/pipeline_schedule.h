// Pipeline schedules: the order of forward and backward microbatch steps per stage, and a stage
// graph's nodes put in that order.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The pipeline schedules `cleave compile --schedule` offers.
enum class PipelineScheduleKind {
  kGPipe,                   // every forward step, then every backward step
  kOneForwardOneBackward,  // 1F1B: a few warm-up forwards, then forwards and backwards alternate
};

// Parses "gpipe" or "1f1b"; anything else is a usage error listing both.
Expected<PipelineScheduleKind> parsePipelineSchedule(std::string_view name);
// The name of `kind` ("gpipe", "1f1b").
std::string_view pipelineScheduleName(PipelineScheduleKind kind);

// One step of a stage's schedule: the forward or the backward pass of one microbatch.
struct PipelineStep {
  bool backward = false;
  int microbatch = 0;
  bool operator==(const PipelineStep&) const = default;
};

// The steps of `stage` (of `num_stages`) over `num_microbatches` microbatches, in execution order:
// every (forward, m) and (backward, m) once, microbatches in increasing order within each pass.
// GPipe: all forwards, then all backwards. 1F1B: min(num_stages - stage - 1, M) warm-up forwards,
// then one forward and one backward alternating, then the remaining backwards.
std::vector<PipelineStep> stageSchedule(PipelineScheduleKind kind, int stage, int num_stages, int num_microbatches);

// Interleaved 1F1B (Megatron-LM's schedule for virtual stages): the model is cut into
// num_stages x num_chunks virtual stages, and rank `stage` holds chunks 0..num_chunks-1, chunk j
// being virtual stage j * num_stages + stage. One step of such a rank: a step of one of its chunks.
struct InterleavedStep {
  int chunk = 0;
  PipelineStep step;
  bool operator==(const InterleavedStep&) const = default;
};

// The steps of rank `stage` under interleaved 1F1B, in execution order, as Megatron-LM runs them:
// forwards go over the microbatches in groups of num_stages, each group through chunk 0, then
// chunk 1, ...; backwards likewise through the chunks in reverse; (num_stages - stage - 1) x 2 +
// (num_chunks - 1) x num_stages warm-up forwards (all of them when num_microbatches ==
// num_stages), then one forward and one backward alternating, then the remaining backwards.
// num_microbatches must be a multiple of num_stages (checked by the caller).
std::vector<InterleavedStep> interleavedSchedule(int stage, int num_stages, int num_chunks, int num_microbatches);

// The steps of virtual stage `virtual_stage` alone, in the order interleavedSchedule runs them on
// its rank (virtual_stage % num_stages): what the virtual stage's own program is ordered by.
std::vector<PipelineStep> virtualStageSchedule(int virtual_stage, int num_stages, int num_chunks, int num_microbatches);

// The most microbatches whose forward pass has run but not yet their backward pass, on `stage`
// under `kind`: M for GPipe, min(num_stages - stage, M) for 1F1B (activations kept at once).
int microbatchesInFlight(PipelineScheduleKind kind, int stage, int num_stages, int num_microbatches);

// Where a node of a pipeline stage's program runs: in the forward or backward step of a microbatch,
// or outside every step (microbatch -1, backward false): nodes shared by all microbatches that run
// first, and nodes after the last step (gradient sums over microbatches, the optimizer, the mean loss).
struct PipelineNodeLabel {
  int microbatch = -1;
  bool backward = false;
  bool operator==(const PipelineNodeLabel&) const = default;
};

// Per node: whether it is forward work, which a graph output (but the gradient norm, which the
// backward pass computes) or a send to a later stage than `stage` needs.
std::vector<bool> forwardNodes(const Graph& graph, int stage);

// Labels the nodes of an unrolled stage graph (unrollMicrobatches, then appendPipelineBackward and
// any appended optimizer) from its structure alone:
// - a node's microbatch comes from its operands: slices of graph inputs (unrollMicrobatches's rows
//   of microbatch m) and receives (their tag) carry one; a node mixing several microbatches, or
//   using such a node, runs after the last step; a node reaching none runs before the first step;
// - a node is forward when a graph output (but grad_norm) or a send to a later stage needs it, else backward.
std::vector<PipelineNodeLabel> labelPipelineNodes(const Graph& graph, int stage, int num_microbatches);

// Reorders `graph`'s nodes (an unrolled stage graph, as labelPipelineNodes takes) into the order of
// `schedule`: nodes outside every step that run first, then each step's nodes, keeping program
// order within each group and never moving a node before one it uses (a node whose operand runs in
// a later step moves to that step; a node combining microbatches, like a gradient sum, runs in the
// step that computes its last operand). Returns each node's label, in the
// new order. Error: a node belongs to a step `schedule` does not have.
Expected<std::vector<PipelineNodeLabel>> orderNodesBySchedule(Graph& graph, int stage, int num_microbatches,
                                                              std::span<const PipelineStep> schedule);

}  // namespace cleave
