// Gradient clipping by the global norm: sums of squares, the norm over devices, the scaled gradients.
#include "passes/training/gradient_clipping.h"

#include <cmath>
#include <string>
#include <vector>

#include "ir/gradient.h"
#include "passes/training/autodiff.h"

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

}  // namespace

Status appendGradientClipping(Graph& graph, double max_norm, const GradientNormScope& scope) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    return Status::usage("gradient clipping: the maximum norm must be a finite number > 0, got " + std::to_string(max_norm));
  if (graph.findValue(kGradNormOutput) != kNoValue)
    return Status::badInput("gradient clipping: the model already has a value named '%" + std::string(kGradNormOutput) + "'");
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
    if (partial == kNoValue) {
      partial = sum;
    } else {
      CLEAVE_ASSIGN_OR_RETURN(partial, addOne(graph, OpId::add, {partial, sum}, {}, "grad_norm.partial"));
    }
  }
  if (partial == kNoValue) {
    CLEAVE_ASSIGN_OR_RETURN(partial, scalarConstant(graph, 0.0, "grad_norm.partial"));
  }
  ValueId total = partial;
  if (scope.sum_over_devices) {
    CLEAVE_ASSIGN_OR_RETURN(total, scope.sum_over_devices(graph, partial));
  }
  // 2. The norm, an output.
  CLEAVE_ASSIGN_OR_RETURN(ValueId norm, addOne(graph, OpId::sqrt, {total}, {}, std::string(kGradNormOutput)));
  graph.outputs.push_back(norm);
  if (grads.empty()) return Status::ok();
  // 3. The coefficient, and each gradient scaled by it under the gradient's name.
  CLEAVE_ASSIGN_OR_RETURN(ValueId epsilon, scalarConstant(graph, 1e-6, "grad_norm.eps"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId limit, scalarConstant(graph, max_norm, "grad_norm.max"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId padded, addOne(graph, OpId::add, {norm, epsilon}, {}, "grad_norm.padded"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId ratio, addOne(graph, OpId::div, {limit, padded}, {}, "clip_coef"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId coefficient, addOne(graph, OpId::clip, {ratio}, {{"max", 1.0}}, "clip_coef.clamped"));
  for (auto& [grad, name] : grads) {
    CLEAVE_TRY(graph.renameValue(grad, graph.uniqueName(name + ".unclipped")));
    ValueId factor = coefficient;
    if (graph.values[grad].type.dtype != DType::kF32) {
      const std::string dtype(dtypeName(graph.values[grad].type.dtype));
      CLEAVE_ASSIGN_OR_RETURN(factor, addOne(graph, OpId::cast, {coefficient}, {{"to", dtype}}, "clip_coef." + dtype));
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId clipped, addOne(graph, OpId::mul, {grad, factor}, {}, name));
    if (graph.values[clipped].name != name) return Status::internal("gradient clipping: cannot name the clipped gradient '" + name + "'");
    for (ValueId& output : graph.outputs)
      if (output == grad) output = clipped;
  }
  return Status::ok();
}

}  // namespace cleave
