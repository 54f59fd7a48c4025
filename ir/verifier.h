// Verifier: checks that a graph is well formed; errors name the node and its source location.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Checks: values defined once and before use, operand counts and attributes per the op table,
// result types equal to what the shape rules infer, parameter initializers, outputs defined.
Status verifyGraph(const Graph& graph);

}  // namespace cleave
