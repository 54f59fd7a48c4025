// The op table: every op defined once, with its operands, attributes and rules.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attribute.h"
#include "ir/comm_kind.h"
#include "ir/sharding_rule.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// Op identifiers, generated from ir/op_list.def.
enum class OpId : uint16_t {
#define CLEAVE_OP(id, name) id,
#include "ir/op_list.def"
#undef CLEAVE_OP
};
constexpr int kNumOps = 0
#define CLEAVE_OP(id, name) +1
#include "ir/op_list.def"
#undef CLEAVE_OP
    ;

// One attribute an op accepts: name, kind, and its default when it is optional.
struct AttrSpec {
  std::string name;
  AttrKind kind;
  bool required = false;
  Attribute default_value = int64_t{0};
};

struct OpDef;

// What a rule sees of a node: its op, operand types, result types (once known) and attributes.
struct OpContext {
  const OpDef& def;
  std::span<const TensorType> operands;
  std::span<const TensorType> results;  // empty inside a shape rule
  const AttrMap& attrs;

  // Attribute accessors that fall back to the AttrSpec default. Kinds are checked by the verifier.
  int64_t getInt(std::string_view name) const;
  double getFloat(std::string_view name) const;
  const std::string& getString(std::string_view name) const;
  const std::vector<int64_t>& getInts(std::string_view name) const;
  const std::vector<double>& getFloats(std::string_view name) const;
  const TensorData* getTensor(std::string_view name) const;
  bool has(std::string_view name) const { return attrs.find(std::string(name)) != attrs.end(); }
  const Attribute& get(std::string_view name) const;
};

// FLOPs and bytes moved by one op instance (for the roofline cost model).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

struct GradientContext;  // defined with autodiff (passes/); the op table only holds the rule

// Result types from operand types and attributes; an error message names the operand at fault.
using ShapeRule = Expected<std::vector<TensorType>> (*)(const OpContext&);
using CostRule = OpCost (*)(const OpContext&);
using ShardingRuleFn = ShardingRule (*)(const OpContext&);
// Emits operand gradients given result gradients (reverse mode). Null: not differentiable.
using GradientRule = Status (*)(GradientContext&);
// The reference computation of an op (docs/ops.md semantics, floats in double precision): results
// from operand tensors whose types are `ctx.operands`, for the result types `ctx.results`. Constant
// folding, the op harness and the kernels' tests all check against it. Errors: bad data (kBadInput).
using ReferenceRule = Expected<std::vector<TensorData>> (*)(const OpContext& ctx,
                                                            std::span<const TensorData* const> operands);
// Whether the reference handles the dtypes (and any other property) of `ctx`'s operands and results.
using ReferenceSupportRule = bool (*)(const OpContext& ctx);

// The family file an op is defined in (ir/ops/<family>.cpp); docs and the harness group ops by it.
enum class OpFamily : uint8_t {
  kElementwise, kLinearAlgebra, kReduction, kConvolution, kShape, kLoss, kGradient, kOptimizer, kCommunication
};
// "elementwise", "linear_algebra", ...
std::string_view opFamilyName(OpFamily family);

// The single definition of an op.
struct OpDef {
  OpId id;
  std::string_view name;
  std::string_view summary;
  int min_operands = 1;
  int max_operands = 1;  // -1: variadic
  std::vector<AttrSpec> attrs;
  ShapeRule shape = nullptr;
  CostRule cost = nullptr;
  ShardingRuleFn sharding = nullptr;
  GradientRule gradient = nullptr;
  ReferenceRule reference = nullptr;                  // null: no reference (communication ops)
  ReferenceSupportRule reference_supports = nullptr;  // null with a reference: every dtype the shape rule accepts

  // Properties the passes ask about (each pass reads them here; no pass keeps a list of op ids).
  bool side_effects = false;  // kept by dce and cse even when no result is used (send)
  bool random = false;        // draws random numbers: never merged by cse nor folded to a constant (dropout)
  bool view = false;          // the result is operand 0's bytes under another type: lowered as an alias
  bool in_place = false;      // the kernel may write its result over a same-typed operand
  bool reshape_like = false;  // only regroups operand 0's dims (reshape, flatten, squeeze, unsqueeze)
  // A reduction factor split over a mesh axis leaves each device a partial mean, not a partial sum.
  bool averages_over_reduction = false;
  // The operand that holds a layer's weights, which tensor parallelism splits by output features
  // (Megatron's column split); -1: none.
  int weight_operand = -1;
  // The communication the op runs in the forward pass, and the one its gradient runs.
  std::optional<CommKind> communication;
  std::optional<CommKind> gradient_communication;
  // A communication-family op that is not a view: lowered to a communication instruction.
  bool isCommunication() const { return family == OpFamily::kCommunication && !view; }
  OpFamily family = OpFamily::kElementwise;  // set by the table from the family function that added it

  const AttrSpec* findAttr(std::string_view attr_name) const;
};

// The definition of `id`.
const OpDef& opDef(OpId id);
// The op named `name`, or nullopt.
std::optional<OpId> lookupOp(std::string_view name);
// The text name of `id`.
std::string_view opName(OpId id);
// All definitions, in OpId order.
std::span<const OpDef> allOpDefs();

// Checks an attribute map against `def`: unknown names, missing required ones, wrong kinds.
Status checkAttributes(const OpDef& def, const AttrMap& attrs);
// Runs `def`'s shape rule after checking operand count and attributes.
Expected<std::vector<TensorType>> inferResultTypes(const OpDef& def, std::span<const TensorType> operands,
                                                   const AttrMap& attrs);

namespace ops {
// Each op family file (ir/ops/*.cpp) appends its definitions; op_table.cpp calls them all once.
void addElementwiseOps(std::vector<OpDef>& table);
void addLinearAlgebraOps(std::vector<OpDef>& table);
void addReductionOps(std::vector<OpDef>& table);
void addConvolutionOps(std::vector<OpDef>& table);
void addShapeOps(std::vector<OpDef>& table);
void addLossOps(std::vector<OpDef>& table);
void addGradientOps(std::vector<OpDef>& table);
void addOptimizerOps(std::vector<OpDef>& table);
void addCommunicationOps(std::vector<OpDef>& table);
// Sets OpDef::gradient for every differentiable op (ir/ops/gradient_rules.cpp); called after the table is built.
void addGradientRules(std::vector<OpDef>& defs_by_id);
}  // namespace ops

}  // namespace cleave
