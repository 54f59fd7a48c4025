// Freezing parameters: the weights a user keeps fixed while the rest train (fine-tuning a head, a
// buffer the exporter left unmarked), as requires_grad_(False) in PyTorch or ONNX Runtime's
// frozen_params: a frozen parameter gets no gradient and no optimizer state, and is kept (and
// checkpointed, exported) as loaded.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Marks every parameter of `graph` whose name matches one of `patterns` (shell globs, fnmatch(3):
// `*` matches any run of characters, dots included) as not trainable. Returns how many parameters
// are frozen after it, those frozen before included. Errors (kUsage): a pattern that is empty or
// matches no parameter, naming the pattern and some of the parameters there are.
Expected<int> freezeParameters(Graph& graph, const std::vector<std::string>& patterns);

// The parameters of `graph` that are not trainable, on one line ("2 parameters (8 elements): a, b"),
// the first `shown` of them by name; empty when every parameter trains.
std::string frozenParametersSummary(const Graph& graph, size_t shown = 4);

}  // namespace cleave
