// Building blocks the op families' gradient rules share: the forward node's attributes, value types, zeros, reshapes.
//
// A gradient rule (OpDef::gradient, next to its op in ir/ops/<family>.cpp) reads the forward node
// (g.node), the gradients of its results (g.result_grads) and sets g.operand_grads, emitting
// backward nodes with g.emit(). Each gradient has its operand's exact type: broadcasting ops sum
// theirs back with g.reduceToShape(). Integer and bool operands (indices, labels, conditions) get
// no gradient. Ops without a rule (comparisons, constant, most gradient ops, the optimizer ops) are
// not differentiable: autodiff reports them when they lie on the path from a trainable parameter
// to the loss.
#pragma once

#include <initializer_list>

#include "ir/gradient.h"
#include "ir/op_table.h"

namespace cleave::ops {

// The forward node's attributes, with the op's defaults for those it does not set.
OpContext forwardAttrs(const GradientContext& g);
// The attributes among `names` that the forward node sets explicitly (the backward op shares their defaults).
AttrMap copyAttrs(const GradientContext& g, std::initializer_list<const char*> names);
// The shape of `v` (a copy, since emitting nodes may move graph.values).
inline Shape shapeOf(const GradientContext& g, ValueId v) { return g.typeOf(v).shape; }
// The dtype of `v`.
inline DType dtypeOf(const GradientContext& g, ValueId v) { return g.typeOf(v).dtype; }
// The gradient of the forward node's first result.
inline ValueId dy(const GradientContext& g) { return g.result_grads[0]; }
// Zeros of `type`: a scalar zero expanded (no dense constant in the graph).
ValueId zeros(GradientContext& g, TensorType type);
// `v` reshaped to `shape` (no node when it already has it).
ValueId reshapeTo(GradientContext& g, ValueId v, const Shape& shape);

}  // namespace cleave::ops
