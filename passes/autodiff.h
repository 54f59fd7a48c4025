// Reverse-mode automatic differentiation: appends the backward pass of a scalar loss to a graph.
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

}  // namespace cleave
