// Building blocks shared by the op family files: attribute specs, operand checks, diagnostics, costs, sharding.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/op_table.h"
#include "ir/sharding_rule_builder.h"

namespace cleave::ops {

// ---- Table building ----

// The definition of `id` that a family function already appended to `table`. When absent (a build
// bug) it appends a nameless definition of `id`, which the table check (opTableStatus) reports.
OpDef& appendedDef(std::vector<OpDef>& table, OpId id);

// ---- Attribute specs ----

// An optional int attribute and its default.
AttrSpec optionalInt(std::string name, int64_t default_value);
// An optional float attribute and its default.
AttrSpec optionalFloat(std::string name, double default_value);
// An optional string attribute and its default.
AttrSpec optionalString(std::string name, std::string default_value);
// An optional ints attribute and its default.
AttrSpec optionalInts(std::string name, std::vector<int64_t> default_value);
// An optional floats attribute and its default.
AttrSpec optionalFloats(std::string name, std::vector<double> default_value);
// A required attribute of `kind`; its stored default is an empty value of that kind.
AttrSpec requiredAttr(std::string name, AttrKind kind);

// ---- Diagnostics (all kBadInput, all starting with "<op>: ") ----

// "<op>: operand <i> has shape [..], <problem>".
Status operandShapeError(const OpContext& ctx, int operand, const std::string& problem);
// "<op>: operand <i> has dtype <d>, <problem>".
Status operandDTypeError(const OpContext& ctx, int operand, const std::string& problem);
// "<op>: attribute '<name>' <problem>".
Status attrError(const OpContext& ctx, std::string_view attr, const std::string& problem);
// Text of a list of ints, e.g. "[1,-1]".
std::string intsStr(std::span<const int64_t> values);

// ---- Shape arithmetic that cannot overflow ----

// Product of `dims`: 0 when any is 0, nullopt when one is negative or the product of the non-zero
// dims does not fit in int64.
std::optional<int64_t> checkedProduct(std::span<const int64_t> dims);
// a + b, or nullopt on int64 overflow.
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);

// ---- Operand and attribute checks ----

// Every operand has non-negative dims and a byte size (over its non-zero dims) that fits in int64.
Status checkOperandShapes(const OpContext& ctx);
// A result shape a rule computed has the same property.
Status checkResultShape(const OpContext& ctx, int result, const TensorType& type);
// Operand `operand` has rank in [min_rank, max_rank] (max_rank -1: no upper bound).
Status requireRank(const OpContext& ctx, int operand, int64_t min_rank, int64_t max_rank = -1);
// Operand `operand` is f32, f16, bf16 or f64.
Status requireFloat(const OpContext& ctx, int operand);
// Operand `operand` is a float or integer type (not bool).
Status requireNumeric(const OpContext& ctx, int operand);
// Operand `operand` is i64 or i32 (indices, labels).
Status requireIndexType(const OpContext& ctx, int operand);
// Operand `operand` has the dtype of operand `reference`.
Status requireSameDType(const OpContext& ctx, int operand, int reference);
// Operand `operand` has exactly `shape`; `expected_what` says where that shape comes from.
Status requireShape(const OpContext& ctx, int operand, const Shape& shape, const std::string& expected_what);
// Int attribute `attr` is 0 or 1.
Status requireFlag(const OpContext& ctx, std::string_view attr);
// Int attribute `attr` (an axis, possibly negative) normalised against operand `operand`'s `rank`.
Expected<int64_t> resolveAxis(const OpContext& ctx, std::string_view attr, int64_t rank, int operand);
// Ints attribute `attr` (axes, possibly negative) normalised against `rank`, each at most once.
// `rank_of` names what the rank belongs to, e.g. "operand 0" or "the result".
Expected<std::vector<int64_t>> resolveAxes(const OpContext& ctx, std::string_view attr, int64_t rank,
                                           const std::string& rank_of);
// Whether `perm` leaves every dim in place (an empty one does).
bool isIdentityPermutation(std::span<const int64_t> perm);
// transpose's permutation of operand 0's dims: `perm` normalised (negative axes), or the dims
// reversed when it is empty; an error unless it permutes every dim once.
Expected<std::vector<int64_t>> transposePerm(const OpContext& ctx);
// One sliced axis of a slice, resolved per ONNX Slice.
struct SliceAxis {
  int64_t axis;
  int64_t start;  // clamped
  int64_t step;
  int64_t count;  // result dim
};
// Resolves slice's starts/ends/axes/steps against operand 0 (ONNX semantics):
// 1. axes default to 0..n-1 and steps to 1; lists must have starts' length; steps must be non-zero.
// 2. Negative starts/ends count from the end; then they are clamped to [0, dim] (step > 0) or
//    start to [0, dim-1] and end to [-1, dim-1] (step < 0).
// 3. The result dim is the number of indices start, start+step, ... before end.
Expected<std::vector<SliceAxis>> resolveSlice(const OpContext& ctx);
// Numpy broadcast of the operands listed in `operands`; the error names the operand and dim at fault.
Expected<Shape> broadcastOperands(const OpContext& ctx, std::initializer_list<int> operands);

// Wraps an op's shape rule: checks operand shapes before it runs and result shapes after, so the
// rule itself may assume non-negative dims whose products fit in int64.
template <ShapeRule kRule>
Expected<std::vector<TensorType>> checkedShapeRule(const OpContext& ctx) {
  CLEAVE_TRY(checkOperandShapes(ctx));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> results, kRule(ctx));
  for (size_t r = 0; r < results.size(); ++r) CLEAVE_TRY(checkResultShape(ctx, static_cast<int>(r), results[r]));
  return results;
}

// ---- Cost and sharding building blocks ----

// The result types of ctx's op for its operands and attributes, from the op's shape rule (cost and
// sharding rules use this rather than ctx.results, so they agree with the shape rule by construction);
// empty when the node is invalid, in which case cost rules give zero and sharding rules an empty rule.
std::vector<TensorType> inferredResults(const OpContext& ctx);
// Wraps a sharding rule written for valid nodes (reading ctx.results): an invalid node, whose shape
// rule fails, gets an empty rule; a valid one is given its inferred result types.
template <ShardingRuleFn rule>
ShardingRule checkedShardingRule(const OpContext& ctx) {
  auto results = inferResultTypes(ctx.def, ctx.operands, ctx.attrs);
  if (!results) return {};
  return rule(OpContext{ctx.def, ctx.operands, *results, ctx.attrs});
}
// The same for a cost rule: an invalid node costs nothing.
template <CostRule rule>
OpCost checkedCostRule(const OpContext& ctx) {
  auto results = inferResultTypes(ctx.def, ctx.operands, ctx.attrs);
  if (!results) return {};
  return rule(OpContext{ctx.def, ctx.operands, *results, ctx.attrs});
}
// Bytes of all operands plus all `results`.
double operandAndResultBytes(const OpContext& ctx, std::span<const TensorType> results);
// Cost of an op doing `flops_per_element` FLOPs per element of its first result, reading every operand
// and writing every result once.
OpCost perElementCost(const OpContext& ctx, double flops_per_element);

// Sharding rule of a broadcasting elementwise op: one pass-through factor per dim of the single result.
ShardingRule broadcastShardingRule(const OpContext& ctx);

}  // namespace cleave::ops
