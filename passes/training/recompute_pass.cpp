// The recompute pass: the backward pass of a training graph computes again the activations it
// reads instead of keeping them (see passes/training/recompute.h).
#include "passes/core/pass_manager.h"
#include "passes/training/recompute.h"

namespace cleave {
namespace {

Status checkMode(const PassOptions& options) { return parseRecomputeMode(options.getString("mode")).status(); }

Status recompute(Graph& graph, const PassOptions& options) {
  CLEAVE_ASSIGN_OR_RETURN(RecomputeMode mode, parseRecomputeMode(options.getString("mode")));
  if (graph.outputs.empty()) return Status::badInput("recompute: the graph has no outputs; output 0 must be the loss");
  // The forward pass: what the loss (output 0) needs; the rest is backward work.
  return recomputeActivations(graph, mode, nodesComputing(graph, {graph.outputs[0]})).status();
}

}  // namespace

PassInfo makeRecomputePass() {
  return PassInfo{
      .name = "recompute",
      .summary = "in a training graph (output 0 the loss), copy forward work into the backward pass so that it "
                 "reads only the kept activations (mode=selective: weight products and layer boundaries; full: "
                 "layer boundaries about every sqrt(n) nodes)",
      .options = {{"mode", std::string("selective"), "none, selective or full"}},
      .run = recompute,
      .check_options = checkMode,
  };
}

}  // namespace cleave
