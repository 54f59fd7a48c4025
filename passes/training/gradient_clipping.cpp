// Gradient clipping by the global norm: sums of squares, the norm over devices, the scaled gradients.
#include "passes/training/gradient_clipping.h"

#include <cmath>
#include <string>
#include <vector>

#include "ir/device_mesh.h"
#include "ir/gradient.h"
#include "passes/training/autodiff.h"
#include "passes/training/optimizer.h"

namespace cleave {
namespace {

Expected<ValueId> addOne(Graph& graph, OpId op, std::vector<ValueId> operands, AttrMap attrs, const std::string& name) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results, graph.addNode(op, std::move(operands), std::move(attrs), {}, {graph.uniqueName(name)}));
  return results[0];
}

// The f32 scalar sum of squares of `grad`.
Expected<ValueId> sumOfSquares(Graph& graph, ValueId grad, const std::string& name) {
  CLEAVE_ASSIGN_OR_RETURN(ValueId squares, addOne(graph, OpId::mul, {grad, grad}, {}, name + ".squared"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId sum, addOne(graph, OpId::reduce_sum, {squares}, {{"keepdims", int64_t{0}}}, name + ".sum_squares"));
  if (graph.values[sum].type.dtype == DType::kF32) return sum;
  return addOne(graph, OpId::cast, {sum}, {{"to", std::string("f32")}}, name + ".sum_squares_f32");
}

Expected<ValueId> scalarConstant(Graph& graph, double value, const std::string& name) {
  return addOne(graph, OpId::constant, {}, {{"value", scalarTensor(value, DType::kF32)}}, name);
}

// partial + part; `part` itself when there is no partial yet.
Expected<ValueId> addToPartial(Graph& graph, ValueId partial, ValueId part) {
  if (partial == kNoValue) return part;
  return addOne(graph, OpId::add, {partial, part}, {}, "grad_norm.partial");
}

// grad_norm = sqrt(total), a graph output.
Expected<ValueId> appendNorm(Graph& graph, ValueId total) {
  CLEAVE_ASSIGN_OR_RETURN(ValueId norm, addOne(graph, OpId::sqrt, {total}, {}, std::string(kGradNormOutput)));
  graph.outputs.push_back(norm);
  return norm;
}

// The clipping coefficient clip(max_norm / (norm + 1e-6), max = 1).
Expected<ValueId> coefficientOf(Graph& graph, ValueId norm, double max_norm) {
  CLEAVE_ASSIGN_OR_RETURN(ValueId epsilon, scalarConstant(graph, 1e-6, "grad_norm.eps"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId limit, scalarConstant(graph, max_norm, "grad_norm.max"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId padded, addOne(graph, OpId::add, {norm, epsilon}, {}, "grad_norm.padded"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId ratio, addOne(graph, OpId::div, {limit, padded}, {}, "clip_coef"));
  return addOne(graph, OpId::clip, {ratio}, {{"max", 1.0}}, "clip_coef.clamped");
}

// `grad` times the coefficient (cast to the gradient's dtype), named `name`.
Expected<ValueId> scaledBy(Graph& graph, ValueId grad, ValueId coefficient, const std::string& name) {
  ValueId factor = coefficient;
  if (graph.values[grad].type.dtype != DType::kF32) {
    const std::string dtype(dtypeName(graph.values[grad].type.dtype));
    CLEAVE_ASSIGN_OR_RETURN(factor, addOne(graph, OpId::cast, {coefficient}, {{"to", dtype}}, "clip_coef." + dtype));
  }
  return addOne(graph, OpId::mul, {grad, factor}, {}, name);
}

Status checkMaxNorm(const Graph& graph, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    return Status::usage("gradient clipping: the maximum norm must be a finite number > 0, got " + std::to_string(max_norm));
  if (graph.findValue(kGradNormOutput) != kNoValue)
    return Status::badInput("gradient clipping: the model already has a value named '%" + std::string(kGradNormOutput) + "'");
  return Status::ok();
}

}  // namespace

Status appendGradientClipping(Graph& graph, double max_norm, const GradientNormScope& scope) {
  CLEAVE_TRY(checkMaxNorm(graph, max_norm));
  // 1. The gradients, and this device's part of the sum of their squares.
  std::vector<std::pair<ValueId, std::string>> grads;  // (gradient, its name)
  ValueId partial = kNoValue;
  const std::vector<Param> params = graph.params;  // a copy: adding nodes does not add params, but stay safe
  for (const Param& param : params) {
    const std::string name = gradientName(graph.values[param.value].name);
    ValueId grad = graph.findValue(name);
    if (!param.trainable || grad == kNoValue) continue;
    grads.emplace_back(grad, name);
    if (scope.counts && !scope.counts(graph, param)) continue;
    CLEAVE_ASSIGN_OR_RETURN(ValueId sum, sumOfSquares(graph, grad, name));
    CLEAVE_ASSIGN_OR_RETURN(partial, addToPartial(graph, partial, sum));
  }
  if (partial == kNoValue) {
    CLEAVE_ASSIGN_OR_RETURN(partial, scalarConstant(graph, 0.0, "grad_norm.partial"));
  }
  ValueId total = partial;
  if (scope.sum_over_devices) {
    CLEAVE_ASSIGN_OR_RETURN(total, scope.sum_over_devices(graph, partial));
  }
  // 2. The norm, an output.
  CLEAVE_ASSIGN_OR_RETURN(ValueId norm, appendNorm(graph, total));
  if (grads.empty()) return Status::ok();
  // 3. The coefficient, and each gradient scaled by it under the gradient's name.
  CLEAVE_ASSIGN_OR_RETURN(ValueId coefficient, coefficientOf(graph, norm, max_norm));
  for (auto& [grad, name] : grads) {
    CLEAVE_TRY(graph.renameValue(grad, graph.uniqueName(name + ".unclipped")));
    CLEAVE_ASSIGN_OR_RETURN(ValueId clipped, scaledBy(graph, grad, coefficient, name));
    if (graph.values[clipped].name != name) return Status::internal("gradient clipping: cannot name the clipped gradient '" + name + "'");
    for (ValueId& output : graph.outputs)
      if (output == grad) output = clipped;
  }
  return Status::ok();
}

Status appendShardedGradientClipping(Graph& graph, double max_norm, const GradientNormScope& scope, int dp_size) {
  CLEAVE_TRY(checkMaxNorm(graph, max_norm));
  // 1. Per optimizer update: the gradient it reads and the parameter it updates (through the
  //    shard_slice of its block); this replica's part of the sum of squares.
  const size_t original = graph.nodes.size();
  std::vector<size_t> updates;
  ValueId partial = kNoValue;
  for (size_t i = 0; i < original; ++i) {
    if (!isOptimizerUpdate(graph.nodes[i])) continue;
    updates.push_back(i);
    ValueId param = graph.nodes[i].operands[0];
    const int32_t slice = graph.values[param].producer;
    if (slice >= 0 && graph.nodes[slice].op == OpId::shard_slice) param = graph.nodes[slice].operands[0];
    const Param* held = graph.findParam(param);
    if (!held) return Status::internal("gradient clipping: an update's operand 0 is not a parameter");
    if (scope.counts && !scope.counts(graph, *held)) continue;
    const ValueId grad = graph.nodes[i].operands[1];
    CLEAVE_ASSIGN_OR_RETURN(ValueId sum, sumOfSquares(graph, grad, graph.values[grad].name));
    // A block is this replica's own; a whole gradient every replica holds counts 1/dp on each.
    if (dp_size > 1 && graph.values[grad].type == graph.values[param].type) {
      CLEAVE_ASSIGN_OR_RETURN(ValueId share, scalarConstant(graph, 1.0 / dp_size, "grad_norm.replica_share"));
      CLEAVE_ASSIGN_OR_RETURN(sum, addOne(graph, OpId::mul, {sum, share}, {}, graph.values[grad].name + ".share"));
    }
    CLEAVE_ASSIGN_OR_RETURN(partial, addToPartial(graph, partial, sum));
  }
  if (partial == kNoValue) {
    CLEAVE_ASSIGN_OR_RETURN(partial, scalarConstant(graph, 0.0, "grad_norm.partial"));
  }
  // 2. Summed over the replicas, then over the other devices as the scope says.
  ValueId total = partial;
  if (dp_size > 1) {
    AttrMap attrs{{"axis", std::string(kDataAxis)}, {"group_size", int64_t{dp_size}}, {"reduce", std::string("sum")}};
    CLEAVE_ASSIGN_OR_RETURN(total, addOne(graph, OpId::all_reduce, {total}, std::move(attrs), "grad_norm.sum_dp"));
  }
  if (scope.sum_over_devices) {
    CLEAVE_ASSIGN_OR_RETURN(total, scope.sum_over_devices(graph, total));
  }
  // 3. The norm and coefficient; each update reads its gradient scaled.
  CLEAVE_ASSIGN_OR_RETURN(ValueId norm, appendNorm(graph, total));
  if (updates.empty()) return Status::ok();
  CLEAVE_ASSIGN_OR_RETURN(ValueId coefficient, coefficientOf(graph, norm, max_norm));
  for (size_t i : updates) {
    const ValueId grad = graph.nodes[i].operands[1];
    CLEAVE_ASSIGN_OR_RETURN(ValueId clipped, scaledBy(graph, grad, coefficient, graph.values[grad].name + ".clipped"));
    graph.nodes[i].operands[1] = clipped;
  }
  // 4. The updates, and what reads their results, after the clipping's nodes (appended last).
  std::vector<bool> after(graph.nodes.size(), false), downstream(graph.values.size(), false);
  for (size_t i = 0; i < original; ++i) {
    bool is_after = isOptimizerUpdate(graph.nodes[i]);
    for (ValueId v : graph.nodes[i].operands) is_after = is_after || downstream[v];
    if (!is_after) continue;
    after[i] = true;
    for (ValueId r : graph.nodes[i].results) downstream[r] = true;
  }
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!after[i]) nodes.push_back(std::move(graph.nodes[i]));
  for (size_t i = 0; i < original; ++i)
    if (after[i]) nodes.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(nodes);
  graph.compact();
  return Status::ok();
}

}  // namespace cleave
