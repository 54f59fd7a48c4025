// GradientContext: what an op's gradient rule sees, and how it emits the backward computation.
#pragma once

#include <memory>
#include <vector>

#include "ir/graph.h"

namespace cleave {

// Passed to OpDef::gradient. The rule reads the forward node and the gradients of its results,
// emits backward nodes into `graph` with emit(), and sets `operand_grads`.
struct GradientContext {
  Graph& graph;
  Node node;                            // a copy of the forward node (graph.nodes grows while emitting)
  std::vector<ValueId> result_grads;    // gradient per result; kNoValue when no gradient flows to it
  std::vector<ValueId> operand_grads;   // set by the rule; kNoValue means "no gradient" (e.g. labels)
  Status status;                        // the first error met while emitting

  GradientContext(Graph& g, Node forward, std::vector<ValueId> grads)
      : graph(g), node(std::move(forward)), result_grads(std::move(grads)), operand_grads(node.operands.size(), kNoValue) {}

  ValueId operand(int i) const { return node.operands[i]; }
  ValueId result(int i) const { return node.results[i]; }
  const TensorType& typeOf(ValueId v) const { return graph.values[v].type; }

  // Emits `op` and returns its results (empty on error, which is kept in `status`).
  std::vector<ValueId> emitAll(OpId op, std::vector<ValueId> operands, AttrMap attrs = {});
  // Emits a single-result op and returns its result (kNoValue on error).
  ValueId emit(OpId op, std::vector<ValueId> operands, AttrMap attrs = {});
  // A scalar constant of `dtype` (shape []).
  ValueId scalar(double value, DType dtype);
  // Sums `grad` over the dimensions broadcasting added or stretched, so it gets `shape` (undoes numpy broadcasting).
  ValueId reduceToShape(ValueId grad, const Shape& shape);
};

// A 0-d tensor of `dtype` holding `value` (rounded to the nearest f16/bf16, truncated toward zero
// for integers, nonzero -> true for bool): the payload of scalar constants autodiff and the
// optimizer emit.
std::shared_ptr<const TensorData> scalarTensor(double value, DType dtype);

}  // namespace cleave
