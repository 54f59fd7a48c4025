// A graph interpreter for tests: evaluates a Graph node by node with the CPU kernels.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/attribute.h"
#include "ir/graph.h"
#include "ir/status.h"

namespace cleave::test {

// Tensors by value name.
using TensorMap = std::map<std::string, TensorData>;

// Evaluates every node of `graph` in program order with runtime::findCpuKernel, given a tensor for
// each input and parameter in `feeds` (by name); returns every value of the graph by name.
Expected<TensorMap> evaluateGraph(const Graph& graph, const TensorMap& feeds);

// The values the parameters have after one step: `feeds`, with each `update` target replaced by
// its new value from `values` (the result of evaluateGraph).
TensorMap applyUpdates(const Graph& graph, const TensorMap& values, TensorMap feeds);

// A tensor of `type` whose elements are `elements` converted to its dtype (f32, f64, i64, i32, bool);
// elements beyond the tensor's size are ignored, missing ones are zero.
TensorData makeTensor(const TensorType& type, const std::vector<double>& elements);
// The elements of `tensor` as doubles (f32, f64, i64, i32, bool).
std::vector<double> toDoubles(const TensorData& tensor);

}  // namespace cleave::test
