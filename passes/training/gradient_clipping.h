// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_: every gradient scaled by
// min(1, max_norm / (norm + 1e-6)), the norm taken over all gradients of all devices.
#pragma once

#include <functional>
#include <string_view>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The name of the scalar output that carries the global gradient norm (before clipping).
inline constexpr std::string_view kGradNormOutput = "grad_norm";

// Which gradients a device's part of the norm covers, and how the parts are summed.
struct GradientNormScope {
  // Whether this device's gradient of `param` counts: false for a copy another device counts (a
  // weight kept whole on every tensor-parallel device, a weight shared by pipeline stages). Empty: all do.
  std::function<bool(const Graph&, const Param&)> counts;
  // Appends the sum over devices of `partial` (a scalar), returning the sum; empty: one device.
  std::function<Expected<ValueId>(Graph&, ValueId partial)> sum_over_devices;
};

// Clips the gradients "P.grad" of `graph`'s trainable parameters (after the backward pass, before
// the optimizer, which reads them by that name):
//  1. each counted gradient's sum of squares, their sum (in f32), summed over devices by the scope;
//  2. grad_norm = sqrt(sum), appended as a graph output named kGradNormOutput;
//  3. coefficient = clip(max_norm / (grad_norm + 1e-6), max = 1); every gradient is multiplied by it
//     under its own name (the unclipped one becomes "P.grad.unclipped").
// A graph without gradients still computes its (zero) part, so that every device joins the sum.
// Errors: max_norm <= 0, a name taken.
Status appendGradientClipping(Graph& graph, double max_norm, const GradientNormScope& scope = {});

// The same for a training graph whose optimizer step ZeRO has sharded over `dp_size` data-parallel
// replicas (shardOptimizerState, shardGradientSums): each update's gradient operand, a block this
// replica holds alone or a whole gradient every replica holds (counted 1/dp_size on each), adds its
// sum of squares; the parts are all-reduced over dp, then over the other devices as `scope` says;
// each update then reads its gradient scaled by the coefficient, and the updates and what reads them
// move after the clipping. So gradients stay reduce-scattered (ZeRO's traffic) under clipping.
Status appendShardedGradientClipping(Graph& graph, double max_norm, const GradientNormScope& scope, int dp_size);

}  // namespace cleave
