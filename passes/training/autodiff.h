// Reverse-mode automatic differentiation: appends the backward pass of a scalar loss (or of seeded cotangents) to a graph.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// What appendBackward differentiates with respect to.
struct AutodiffOptions {
  // The parameters that get gradients; empty means every trainable parameter.
  std::vector<ValueId> wrt;
};

// The name of parameter `param_name`'s gradient: "<param_name>.grad" (plan lowering relies on it).
std::string gradientName(std::string_view param_name);

// Appends the gradient of the float scalar `loss` with respect to each parameter of `options` that
// the loss depends on, as the value named gradientName(parameter); a parameter the loss does not
// depend on gets none. Gradient rules run in reverse program order over the nodes on a path from a
// parameter to the loss; several gradients of one value are added in a fixed order. Backward nodes
// no parameter gradient needs are not kept; the ids of values that existed before stay valid.
// Errors: the loss is not a float scalar or depends on no parameter, a parameter's gradient name is
// taken, or a node on the path has no gradient rule (named with its location and op).
Status appendBackward(Graph& graph, ValueId loss, const AutodiffOptions& options = {});

// One starting point of a seeded backward pass: forward value `value` gets the cotangent
// `cotangent`, a value of the same type already in the graph (e.g. received from another device);
// kNoValue means 1 (for a float scalar, as appendBackward seeds its loss).
struct BackwardSeed {
  ValueId value = kNoValue;
  ValueId cotangent = kNoValue;
};

// What appendSeededBackward differentiates, and with respect to what.
struct SeededBackwardOptions {
  std::vector<BackwardSeed> seeds;   // the cotangents of several values add up, as for one loss
  std::vector<ValueId> wrt_params;   // parameters that get gradients; empty means every trainable one
  std::vector<ValueId> wrt_values;   // other values whose gradients are wanted (e.g. received activations)
};

// Appends the backward pass of several seeds at once (the vector-Jacobian product of their
// cotangents): each parameter of `wrt_params` that some seed depends on gets its gradient named
// gradientName(parameter), as appendBackward does, and the gradient of each `wrt_values` entry is
// returned in the same order (kNoValue when no seed depends on it through float values). A seed
// depending on nothing differentiated adds nothing; appendBackward(graph, loss) is this with the
// one seed {loss}. Errors as appendBackward's, plus a seed whose cotangent has another type.
Expected<std::vector<ValueId>> appendSeededBackward(Graph& graph, const SeededBackwardOptions& options);

}  // namespace cleave
