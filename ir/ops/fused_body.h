// The body of a fused node: the elementwise steps it computes, as one line of text a plan can hold.
//
// Grammar (docs/ops.md, "fused"): steps separated by "; ", then the returned steps:
//   t0 = mul(x0, 0.5); t1 = gelu(t0)[approximate=tanh]; t2 = add(t1, x1); return t1, t2
// xI is the fused node's operand I, tJ an earlier step's result, a number a scalar literal of the
// step's dtype (a folded constant); [name=value, ...] are the step op's attributes, written bare
// (an integer list as [0 1]). A column sum (isColumnSum) ends a body:
//   t0 = gelu_grad(x0, x1); t1 = reduce_sum(t0)[axes=[0 1], keepdims=0]; return t0, t1
// and so does a total sum (isTotalSum), the only step such a body returns:
//   t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attribute.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

enum class OpId : uint16_t;

// One argument of a step: an operand of the fused node, an earlier step, or a scalar literal.
struct FusedArg {
  enum class Kind : uint8_t { kOperand, kStep, kLiteral };
  Kind kind = Kind::kOperand;
  int index = 0;         // operand or step index
  double literal = 0.0;  // kLiteral: the value, exactly representable in the step's dtype

  bool operator==(const FusedArg&) const = default;
};

// One elementwise op application inside a fused node, or one result of an op with several
// (layer_norm_grad's dx, dscale and dbias are three steps, written "t2, t3, t4 = layer_norm_grad(...)").
struct FusedStep {
  OpId op;
  std::vector<FusedArg> args;
  AttrMap attrs;
  int result = 0;  // which result of the op; > 0: continues the step before it (same op, args, attrs)
};

// The steps of a fused node and which of them it returns, in result order.
struct FusedBody {
  std::vector<FusedStep> steps;
  std::vector<int> returned;

  // One more than the largest operand index a step reads (the fused node's operand count).
  int operandCount() const;
};

// Parses a body; errors (kBadInput) quote the step at fault.
Expected<FusedBody> parseFusedBody(std::string_view text);
// The body as text; parseFusedBody(printFusedBody(b)) gives b back.
std::string printFusedBody(const FusedBody& body);

// The type of every step, for operands of `operand_types`: each step's op's shape rule on its
// arguments' types, a literal being a scalar of the step's first non-literal argument's dtype.
// Errors name the step. Also checks what the kernels assume: every step's op is fusable, or
// fusable along the last axis (softmax, layer_norm, rms_norm and isRowGradientOp's) as the last
// statement, along the last axis, on f32, or a column or total sum (isColumnSum, isTotalSum); an
// op's results are all named; every returned step but the per-column ones and a total sum has the
// shape every operand and step broadcasts to; all share one float dtype.
Expected<std::vector<TensorType>> inferFusedStepTypes(const FusedBody& body, std::span<const TensorType> operand_types);

// A column sum: a reduce_sum step over every dim but the last of a returned f32 step (a bias
// gradient), or of an operand as a body's only step (isLoneColumnSum). Column sums are the body's
// last steps, no step reads one, and each is returned after the steps of the full shape; kernels
// add each row into it as they compute the row.
bool isColumnSum(const FusedStep& step);
// Whether a reduce_sum with `attrs` of `summed` to `result` sums f32 over every dim but the last
// (axes [0, ..., rank-2], keepdims 0, rank 2 or more): what a column sum computes.
bool sumsColumns(const AttrMap& attrs, const TensorType& summed, const TensorType& result);
// A body that is one column sum of an operand (a bias gradient whose tensor no chain computes):
//   t0 = reduce_sum(x0)[axes=[0 1], keepdims=0]; return t0
// its iteration space is the operand's shape.
bool isLoneColumnSum(const FusedBody& body);
// A total sum: a reduce_sum step over all dims (no axes, keepdims 0) of an f32 step into f32[] (a
// sum of squares for gradient clipping). It is the body's last step and the only one it returns;
// the body's iteration space is the summed step's shape, and kernels add each element into it as
// they compute the element.
bool isTotalSum(const FusedStep& step);
// The shape a body's kernels iterate over: a lone column sum's operand's, a total sum's summed
// step's, else the returned steps' common shape (per-column steps aside). For a body that
// inferFusedStepTypes accepted, with its `step_types`.
const Shape& fusedIterationShape(const FusedBody& body, std::span<const TensorType> step_types,
                                 std::span<const TensorType> operand_types);
// The gradient of a row norm: layer_norm_grad (dx, dscale, dbias) or rms_norm_grad (dx, dscale).
// It ends a body along the last axis; its results after dx hold one value per column.
bool isRowGradientOp(OpId op);
// A step holding one value per column: a column sum, or a row gradient's dscale or dbias (sums
// over the rows the kernel adds up the same way). Every such step is returned.
bool isPerColumn(const FusedStep& step);

// The type of a literal argument of a step whose other arguments have `dtype`: a scalar.
TensorType fusedLiteralType(DType dtype);

}  // namespace cleave
