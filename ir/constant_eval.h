// Constant evaluation: the reference computation of one node whose operands are all known tensors.
#pragma once

#include <span>
#include <vector>

#include <optional>

#include "ir/attribute.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// True when evaluateConstantNode computes `op` on these operand and result types: the op is constant
// foldable (OpDef::constant_foldable: the elementwise, comparison, cast, data-movement and reduction
// ops), and its reference handles these dtypes (OpDef::reference_supports; f32, f64, i64, i32, bool).
bool isConstantEvaluable(OpId op, std::span<const TensorType> operand_types,
                         std::span<const TensorType> result_types);

// Computes a node's results from its constant operands with the op's reference, following
// docs/ops.md. `result_types` are the node's (already inferred) result types. Errors: bad data such as an out-of-range gather index
// or an integer division by zero (kBadInput), or an op or dtype isConstantEvaluable rejects (kInternal).
Expected<std::vector<TensorData>> evaluateConstantNode(OpId op, const AttrMap& attrs,
                                                       std::span<const TensorData* const> operands,
                                                       std::span<const TensorType> result_types);

// The value of `v` when a constant node makes it and it has one element of a float dtype (f32,
// f64 or bf16), else nothing: the scalars passes match (an epsilon, an exponent, a literal).
std::optional<double> scalarConstantValue(const Graph& graph, ValueId v);
// The same for one element of an integer dtype (i64 or i32): an index.
std::optional<int64_t> scalarConstantIndex(const Graph& graph, ValueId v);

}  // namespace cleave
