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
#include "ir/ops/communication_ops.h"
#include "ir/ops/convolution.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/fused_ops.h"
#include "ir/ops/gradient_ops.h"
#include "ir/ops/linear_algebra.h"
#include "ir/ops/loss.h"
#include "ir/ops/optimizer_ops.h"
#include "ir/ops/reduction.h"
#include "ir/ops/shape_ops.h"
#include "ir/sharding_rule.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// Every op as X(id, "text name"), family by family, in OpId order. An op's id is listed in its
// family header (ir/ops/<family>.h) and defined in its family file (ir/ops/<family>.cpp). Op ids
// are not stored anywhere (plans name ops by their text name), so an op may be added anywhere.
#define CLEAVE_ALL_OPS(X)        \
  CLEAVE_LINEAR_ALGEBRA_OPS(X)   \
  CLEAVE_ELEMENTWISE_OPS(X)      \
  CLEAVE_REDUCTION_OPS(X)        \
  CLEAVE_CONVOLUTION_OPS(X)      \
  CLEAVE_SHAPE_OPS(X)            \
  CLEAVE_LOSS_OPS(X)             \
  CLEAVE_GRADIENT_OPS(X)         \
  CLEAVE_OPTIMIZER_OPS(X)        \
  CLEAVE_COMMUNICATION_OPS(X)     \
  CLEAVE_FUSED_OPS(X)

// Op identifiers.
enum class OpId : uint16_t {
#define CLEAVE_OP_ID(id, name) id,
  CLEAVE_ALL_OPS(CLEAVE_OP_ID)
#undef CLEAVE_OP_ID
};
constexpr int kNumOps = 0
#define CLEAVE_OP_COUNT(id, name) +1
    CLEAVE_ALL_OPS(CLEAVE_OP_COUNT)
#undef CLEAVE_OP_COUNT
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

struct GradientContext;  // defined in ir/gradient.h; the op table only holds the rule

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
// What an op's gradient communicates when that depends on its attributes (`ctx` holds only them).
using GradientCommunicationRule = std::optional<CommKind> (*)(const OpContext& ctx);

// The family file an op is defined in (ir/ops/<family>.cpp); docs and the harness group ops by it.
enum class OpFamily : uint8_t {
  kElementwise, kLinearAlgebra, kReduction, kConvolution, kShape, kLoss, kGradient, kOptimizer, kCommunication, kFused
};
// "elementwise", "linear_algebra", ...
std::string_view opFamilyName(OpFamily family);

// What each device holds when a reduction factor of an op is split over a mesh axis: a partial sum
// (summed by an all-reduce), a partial mean (averaged), or nothing combinable (max: the factor is
// kept whole).
enum class PartialReduction : uint8_t { kSum, kMean, kNone };

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
  // Constant folding computes the op with its reference when every operand is a constant (the ops
  // whose folded results the kernels reproduce exactly: elementwise, data movement, reductions).
  bool constant_foldable = false;
  bool view = false;          // the result is operand 0's bytes under another type: lowered as an alias
  bool stops_gradient = false;  // the result is a constant to autodiff (detach): no gradient passes through
  bool in_place = false;      // the kernel may write its result over a same-typed operand
  bool reshape_like = false;  // only regroups operand 0's dims (reshape, flatten, squeeze, unsqueeze)
  // An elementwise op (f32 and bf16, operands broadcasting to its one result) that the fusion pass
  // may merge into a fused node: the fused kernels' code generator implements each such op.
  bool fusable = false;
  // A normalisation along one axis (softmax, layer_norm, layer_norm_grad) that may end a fused chain
  // when its axis is the last: the fused kernel finishes each row of the chain's values with it.
  // Its first operand is the chain's; any others hold one value per column (layer_norm's scale and
  // bias), but for layer_norm_grad's x, a row like the chain's.
  bool fusable_along_last_axis = false;
  // What a reduction factor split over a mesh axis leaves each device.
  PartialReduction partial_reduction = PartialReduction::kSum;
  // The attribute that spells the result's shape (reshape's and expand's "shape"), which the
  // partitioner rewrites to the local shape; empty: none.
  std::string_view result_shape_attr = {};
  // The operand that holds a layer's weights, which tensor parallelism splits by output features
  // (Megatron's column split); -1: none.
  int weight_operand = -1;
  // The communication the op runs in the forward pass, and the one its gradient runs; when the
  // latter depends on the attributes, gradient_communication_rule says it (gradientCommunication).
  std::optional<CommKind> communication = std::nullopt;
  std::optional<CommKind> gradient_communication = std::nullopt;
  GradientCommunicationRule gradient_communication_rule = nullptr;
  // A communication-family op that is not a view: lowered to a communication instruction.
  bool isCommunication() const { return family == OpFamily::kCommunication && !view; }
  OpFamily family = OpFamily::kElementwise;  // set by the table from the family function that added it

  const AttrSpec* findAttr(std::string_view attr_name) const;
};

// The definition of `id`.
const OpDef& opDef(OpId id);
// What the gradient of an instance of `def` with `attrs` communicates: its rule's answer, else
// gradient_communication.
std::optional<CommKind> gradientCommunication(const OpDef& def, const AttrMap& attrs);
// The op named `name`, or nullopt.
std::optional<OpId> lookupOp(std::string_view name);
// The text name of `id`.
std::string_view opName(OpId id);
// All definitions, in OpId order.
std::span<const OpDef> allOpDefs();

// Checks an attribute map against `def`: unknown names, missing required ones, wrong kinds.
Status checkAttributes(const OpDef& def, const AttrMap& attrs);
// Ok, or the first inconsistency found while building the table (a build bug, which
// tests/unit/op_table_test.cpp reports; lookups still answer, from an incomplete table): an op defined twice or not at all, defined in
// another family's file, or lacking a shape, cost or sharding rule.
Status opTableStatus();
// The check behind opTableStatus(), on definitions as the family functions append them, each with
// its family set.
Status checkOpDefinitions(std::span<const OpDef> defs);

// Runs `def`'s shape rule after checking operand count and attributes.
Expected<std::vector<TensorType>> inferResultTypes(const OpDef& def, std::span<const TensorType> operands,
                                                   const AttrMap& attrs);

}  // namespace cleave
