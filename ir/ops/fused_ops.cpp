// The fused op: a chain of elementwise steps (ir/ops/fused_body.h) computed in one pass over memory.
#include "ir/ops/fused_ops.h"

#include <algorithm>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/fused_body.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"
#include "ir/sharding_rule_builder.h"

namespace cleave::ops {
namespace {

using Types = std::vector<TensorType>;

struct TypedBody {
  FusedBody body;
  Types step_types;
};

Expected<TypedBody> typedBody(const OpContext& ctx) {
  auto body = parseFusedBody(ctx.getString("body"));
  if (!body) return body.status().withContext("fused: ");
  auto types = inferFusedStepTypes(*body, ctx.operands);
  if (!types) return types.status().withContext("fused: ");
  return TypedBody{std::move(*body), std::move(*types)};
}

// The operand types of step `s` (literals as scalars of the step's dtype).
Types stepOperandTypes(const TypedBody& typed, std::span<const TensorType> operands, size_t s) {
  const FusedStep& step = typed.body.steps[s];
  Types types;
  for (const FusedArg& arg : step.args) {
    switch (arg.kind) {
      case FusedArg::Kind::kOperand: types.push_back(operands[arg.index]); break;
      case FusedArg::Kind::kStep: types.push_back(typed.step_types[arg.index]); break;
      case FusedArg::Kind::kLiteral: types.push_back(fusedLiteralType(typed.step_types[s].dtype)); break;
    }
  }
  return types;
}

// The results of the op of step `s` (result 0 of its statement): the step's and its continuations'.
Types statementResults(const TypedBody& typed, size_t s) {
  Types results{typed.step_types[s]};
  for (size_t k = s + 1; k < typed.body.steps.size() && typed.body.steps[k].result > 0; ++k)
    results.push_back(typed.step_types[k]);
  return results;
}

// The cost of the op of step `s` (result 0 of its statement) as a separate node.
OpCost stepCost(const TypedBody& typed, std::span<const TensorType> operands, size_t s) {
  const FusedStep& step = typed.body.steps[s];
  const OpDef& def = opDef(step.op);
  const Types operand_types = stepOperandTypes(typed, operands, s);
  const Types results = statementResults(typed, s);
  return def.cost(OpContext{def, operand_types, results, step.attrs});
}

Expected<Types> fusedShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(TypedBody typed, typedBody(ctx));
  Types results;
  for (int r : typed.body.returned) results.push_back(typed.step_types[r]);
  return results;
}

// The steps' FLOPs (each by its own op's cost rule); bytes: the operands read and results written once.
OpCost fusedCost(const OpContext& ctx) {
  auto typed = typedBody(ctx);
  if (!typed) return {};
  OpCost cost;
  for (size_t s = 0; s < typed->body.steps.size(); ++s)
    if (typed->body.steps[s].result == 0) cost.flops += stepCost(*typed, ctx.operands, s).flops;
  Types results;
  for (int r : typed->body.returned) results.push_back(typed->step_types[r]);
  cost.bytes = operandAndResultBytes(ctx, results);
  return cost;
}

// A bf16 tensor's values as f32 (exact), and an f32 tensor rounded to bf16 (nearest even).
TensorData widenedToF32(const TensorData& t) {
  if (t.type.dtype != DType::kBF16) return t;
  TensorData out{TensorType{DType::kF32, t.type.shape}, std::vector<uint8_t>(static_cast<size_t>(t.type.numel()) * 4)};
  for (int64_t i = 0; i < t.type.numel(); ++i) out.as<float>()[i] = bfloat16Value(t.as<uint16_t>()[i]);
  return out;
}
TensorData roundedToBf16(const TensorData& t) {
  TensorData out{TensorType{DType::kBF16, t.type.shape}, std::vector<uint8_t>(static_cast<size_t>(t.type.numel()) * 2)};
  for (int64_t i = 0; i < t.type.numel(); ++i) out.as<uint16_t>()[i] = bfloat16Bits(t.as<float>()[i]);
  return out;
}

// Evaluates the steps one by one with their own ops' references.
Expected<std::vector<TensorData>> fusedReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  CLEAVE_ASSIGN_OR_RETURN(TypedBody typed, typedBody(ctx));
  std::vector<TensorData> values(typed.body.steps.size());
  for (size_t s = 0; s < typed.body.steps.size(); ++s) {
    const FusedStep& step = typed.body.steps[s];
    const OpDef& def = opDef(step.op);
    if (step.result > 0) continue;  // set with result 0 of its statement
    const Types operand_types = stepOperandTypes(typed, ctx.operands, s);
    std::vector<TensorData> literals;
    literals.reserve(step.args.size());
    std::vector<const TensorData*> args;
    for (size_t a = 0; a < step.args.size(); ++a) {
      const FusedArg& arg = step.args[a];
      if (arg.kind == FusedArg::Kind::kOperand) args.push_back(operands[arg.index]);
      if (arg.kind == FusedArg::Kind::kStep) args.push_back(&values[arg.index]);
      if (arg.kind == FusedArg::Kind::kLiteral) {
        literals.push_back(operand_types[a].dtype == DType::kBF16
                               ? roundedToBf16(referenceTensor(fusedLiteralType(DType::kF32), {arg.literal}))
                               : referenceTensor(operand_types[a], {arg.literal}));
        args.push_back(&literals.back());
      }
    }
    const Types result = statementResults(typed, s);
    const OpContext step_ctx{def, operand_types, result, step.attrs};
    if (!def.reference) return referenceError(ctx, "step t" + std::to_string(s) + " (" + std::string(def.name) + ") has no reference");
    if (!def.reference_supports || def.reference_supports(step_ctx)) {
      CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> step_results, def.reference(step_ctx, args));
      for (size_t k = 0; k < step_results.size(); ++k) values[s + k] = std::move(step_results[k]);
      continue;
    }
    // A bf16 step whose op has no bf16 reference: computed in f32 and rounded to bf16, as the
    // fused kernels compute it.
    Types widened_types = operand_types;
    std::vector<TensorData> widened;
    widened.reserve(args.size());
    std::vector<const TensorData*> widened_args;
    for (size_t a = 0; a < args.size(); ++a) {
      widened_types[a].dtype = DType::kF32;
      widened.push_back(widenedToF32(*args[a]));
      widened_args.push_back(&widened.back());
    }
    const Types widened_result{TensorType{DType::kF32, result[0].shape}};
    const OpContext widened_ctx{def, widened_types, widened_result, step.attrs};
    if (def.reference_supports && !def.reference_supports(widened_ctx))
      return referenceError(ctx, "step t" + std::to_string(s) + " (" + std::string(def.name) + ") has no reference for its dtype");
    CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorData> step_results, def.reference(widened_ctx, widened_args));
    values[s] = roundedToBf16(step_results[0]);
  }
  std::vector<TensorData> results;
  for (int r : typed.body.returned) results.push_back(values[r]);
  return results;
}

// Pointwise with broadcasting over the full shape, but a split leading dim would leave each device
// a partial sum of a per-column step (any split one of a total sum), and a split last dim a part of
// each row to a row step (softmax, a layer or RMS norm or its gradient): those dims stay whole.
ShardingRule fusedShardingRule(const OpContext& ctx) {
  auto typed = typedBody(ctx);
  if (!typed) return {};
  const std::vector<FusedStep>& steps = typed->body.steps;
  const bool per_column = std::any_of(steps.begin(), steps.end(), isPerColumn);
  const bool total = isTotalSum(steps.back());
  const bool rows = std::any_of(steps.begin(), steps.end(), [](const FusedStep& s) { return opDef(s.op).fusable_along_last_axis; });
  std::vector<TensorType> results;
  for (int r : typed->body.returned) results.push_back(typed->step_types[r]);
  const Shape& shape = fusedIterationShape(typed->body, typed->step_types, ctx.operands);
  ShardingRuleBuilder rule(ctx.operands, results);
  const int last = static_cast<int>(shape.size()) - 1;
  rule.addBroadcastingPointwise(shape, [&](int d) {
    return total || (d == last ? rows : per_column) ? FactorKind::kNeedReplication : FactorKind::kPassThrough;
  });
  return rule.build();
}

// The bytes the steps would move as separate kernels. A run of pointwise steps that are functions
// of one tensor alone (and literals) counts as one kernel, which reads that tensor and writes what
// leaves the run: the formulas a GELU and its slope are written as (passes/fusion/gelu_slope.h, 12
// steps) are the work of one gelu kernel, not of 12. (So a model's own unary chains, SiLU's
// x·sigmoid(x), count as one kernel too: the saving is never overstated.)
double separateKernelBytes(const TypedBody& typed, std::span<const TensorType> operands) {
  const std::vector<FusedStep>& steps = typed.body.steps;
  // The tensor a step's run reads: an operand (>= 0) or a step (-1 - s); kNone for other steps.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> run_source(steps.size(), kNone);
  auto sourceOf = [&](const FusedArg& arg) -> int64_t {
    if (arg.kind == FusedArg::Kind::kOperand) return arg.index;
    return run_source[arg.index] != kNone ? run_source[arg.index] : -1 - static_cast<int64_t>(arg.index);
  };
  double bytes = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const FusedStep& step = steps[s];
    if (step.result > 0) continue;
    const bool continued = s + 1 < steps.size() && steps[s + 1].result > 0;
    const bool pointwise = !continued && !isPerColumn(step) && !isTotalSum(step) && !opDef(step.op).fusable_along_last_axis;
    int64_t source = kNone;
    bool one_source = pointwise;
    for (const FusedArg& arg : step.args) {
      if (!one_source || arg.kind == FusedArg::Kind::kLiteral) continue;
      const int64_t of_arg = sourceOf(arg);
      if (source != kNone && of_arg != source) one_source = false;
      source = of_arg;
    }
    if (one_source && source != kNone) {
      run_source[s] = source;
    } else {
      bytes += stepCost(typed, operands, s).bytes;
    }
  }
  // Each run reads its source once and writes the steps read outside it or returned.
  std::vector<bool> written(steps.size(), false);
  for (int r : typed.body.returned) written[r] = true;
  for (size_t s = 0; s < steps.size(); ++s)
    for (const FusedArg& arg : steps[s].args)
      if (arg.kind == FusedArg::Kind::kStep && run_source[s] == kNone) written[arg.index] = true;
  std::vector<int64_t> sources_read;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (run_source[s] == kNone) continue;
    if (written[s]) bytes += static_cast<double>(typed.step_types[s].bytes());
    const int64_t source = run_source[s];
    if (std::find(sources_read.begin(), sources_read.end(), source) != sources_read.end()) continue;
    sources_read.push_back(source);
    bytes += static_cast<double>(source >= 0 ? operands[source].bytes() : typed.step_types[-1 - source].bytes());
  }
  return bytes;
}

}  // namespace

double fusedBytesSaved(const OpContext& ctx) {
  auto typed = typedBody(ctx);
  if (!typed) return 0;
  return std::max(0.0, separateKernelBytes(*typed, ctx.operands) - fusedCost(ctx).bytes);
}

void addFusedOps(std::vector<OpDef>& table) {
  table.push_back(OpDef{.id = OpId::fused,
                        .name = "fused",
                        .summary = "the elementwise steps of `body` in one pass (made by the fusion pass)",
                        .min_operands = 1,
                        .max_operands = -1,
                        .attrs = {requiredAttr("body", AttrKind::kString)},
                        .shape = checkedShapeRule<fusedShape>,
                        .cost = fusedCost,
                        .sharding = fusedShardingRule,
                        .reference = fusedReference});
}

}  // namespace cleave::ops
