// Optimizer ops: one parameter's update per step, with PyTorch's SGD and AdamW rules.
#include <cmath>

#include "ir/lr_schedule.h"
#include "ir/op_table.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/optimizer_ops.h"
#include "ir/ops/reference_support.h"

namespace cleave::ops {
namespace {

using Types = std::vector<TensorType>;

Status checkStep(const OpContext& c, int index) {
  const TensorType& step = c.operands[index];
  if (step.dtype != DType::kI64 || step.rank() != 0)
    return Status::badInput(std::string(c.def.name) + ": operand " + std::to_string(index) +
                            " (step) must be i64[], got " + step.str());
  return Status::ok();
}

Status checkLike(const OpContext& c, int index, const char* what) {
  if (c.operands[index] == c.operands[0]) return Status::ok();
  return Status::badInput(std::string(c.def.name) + ": operand " + std::to_string(index) + " (" + what + ") is " +
                          c.operands[index].str() + ", it must match the parameter " + c.operands[0].str());
}

// The gradient scale, when the update has one: a scalar of the parameter's dtype.
Status checkGradientScale(const OpContext& c) {
  const int k = gradientScaleOperand(c);
  if (k < 0) return Status::ok();
  if (c.operands.size() != static_cast<size_t>(k) + 1)
    return Status::badInput(std::string(c.def.name) + ": " + std::to_string(c.operands.size()) + " operands; after its own " +
                            std::to_string(k) + " it takes one, the gradient scale");
  const TensorType scalar{c.operands[0].dtype, {}};
  if (c.operands[static_cast<size_t>(k)] == scalar) return Status::ok();
  return Status::badInput(std::string(c.def.name) + ": operand " + std::to_string(k) + " (gradient scale) must be " +
                          scalar.str() + ", got " + c.operands[static_cast<size_t>(k)].str());
}

// sgd_update(w, g, step, [buf], [grad_scale]) -> w', [buf']
Expected<Types> sgdShape(const OpContext& c) {
  const TensorType& w = c.operands[0];
  if (w.dtype != DType::kF32 && w.dtype != DType::kF64)
    return Status::badInput("sgd_update: operand 0 (parameter) must be f32 or f64, got " + w.str());
  CLEAVE_TRY(checkLike(c, 1, "gradient"));
  CLEAVE_TRY(checkStep(c, 2));
  const bool has_buffer = c.getFloat("momentum") != 0.0;
  if (c.operands.size() < (has_buffer ? 4u : 3u))
    return Status::badInput("sgd_update: a momentum buffer operand is needed when momentum != 0");
  if (has_buffer) CLEAVE_TRY(checkLike(c, 3, "momentum buffer"));
  CLEAVE_TRY(checkGradientScale(c));
  if (c.getInt("nesterov") && (c.getFloat("momentum") <= 0 || c.getFloat("dampening") != 0))
    return Status::badInput("sgd_update: nesterov needs momentum > 0 and dampening 0 (as PyTorch)");
  CLEAVE_TRY(checkLrScheduleAttrs(c));
  return has_buffer ? Types{w, w} : Types{w};
}

// adamw_update(w, g, m, v, step, [grad_scale]) -> w', m', v'
Expected<Types> adamwShape(const OpContext& c) {
  const TensorType& w = c.operands[0];
  if (w.dtype != DType::kF32 && w.dtype != DType::kF64)
    return Status::badInput("adamw_update: operand 0 (parameter) must be f32 or f64, got " + w.str());
  CLEAVE_TRY(checkLike(c, 1, "gradient"));
  CLEAVE_TRY(checkLike(c, 2, "first moment"));
  CLEAVE_TRY(checkLike(c, 3, "second moment"));
  CLEAVE_TRY(checkStep(c, 4));
  CLEAVE_TRY(checkGradientScale(c));
  double beta1 = c.getFloat("beta1"), beta2 = c.getFloat("beta2");
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)
    return Status::badInput("adamw_update: beta1 and beta2 must be in [0, 1)");
  CLEAVE_TRY(checkLrScheduleAttrs(c));
  return Types{w, w, w};
}

// sgd_matmul_update(w, a, b, step, [buf]) -> w', [buf']: sgd_update(w, op(a)·op(b), step, [buf]) for
// matrices a and b whose product has w's type, without weight decay or nesterov.
Expected<Types> sgdMatmulShape(const OpContext& c) {
  const TensorType& w = c.operands[0];
  if (w.dtype != DType::kF32 && w.dtype != DType::kF64)
    return Status::badInput("sgd_matmul_update: operand 0 (parameter) must be f32 or f64, got " + w.str());
  for (int operand : {1, 2})
    if (c.operands[static_cast<size_t>(operand)].rank() != 2)
      return Status::badInput("sgd_matmul_update: operand " + std::to_string(operand) + " must be a matrix, got " +
                              c.operands[static_cast<size_t>(operand)].str());
  const OpDef& matmul = opDef(OpId::matmul);
  const Types factors = {c.operands[1], c.operands[2]};
  auto product = matmul.shape(OpContext{matmul, factors, {}, c.attrs});
  if (!product) return Status::badInput("sgd_matmul_update: operands 1 and 2: " + product.status().message());
  if ((*product)[0] != w)
    return Status::badInput("sgd_matmul_update: the gradient op(a)·op(b) is " + (*product)[0].str() +
                            ", it must match the parameter " + w.str());
  CLEAVE_TRY(checkStep(c, 3));
  const bool has_buffer = c.getFloat("momentum") != 0.0;
  if (c.operands.size() != (has_buffer ? 5u : 4u))
    return Status::badInput(std::string("sgd_matmul_update: ") + std::to_string(c.operands.size()) +
                            " operands; it takes w, a, b, step" + (has_buffer ? " and the momentum buffer" : "") +
                            (has_buffer ? " (momentum != 0)" : " (momentum 0)"));
  if (has_buffer) CLEAVE_TRY(checkLike(c, 4, "momentum buffer"));
  CLEAVE_TRY(checkLrScheduleAttrs(c));
  return has_buffer ? Types{w, w} : Types{w};
}

// The product's 2·m·n·k FLOPs and the update's per element; every operand read, every result written.
OpCost sgdMatmulCost(const OpContext& c) {
  const double k = static_cast<double>(sgdMatmulGemm(c).k);
  const double elements = static_cast<double>(c.operands[0].numel());
  return {2 * elements * k + 4 * elements, operandAndResultBytes(c, c.results)};
}

// m and n pass through from a and b to the parameter, its buffer and their new values; k cannot be
// split (a partial product would update every shard's whole parameter by a part of the gradient).
ShardingRule sgdMatmulSharding(const OpContext& c) {
  ShardingRuleBuilder rule(c.operands, c.results);
  const bool ta = c.getInt("transpose_a") == 1, tb = c.getInt("transpose_b") == 1;
  const int kNo = ShardingRuleBuilder::kNoDim;
  rule.addFactor({0, ta ? 1 : 0, kNo, kNo, 0}, {0, 0});                                // m
  rule.addFactor({kNo, ta ? 0 : 1, tb ? 1 : 0}, {}, FactorKind::kNeedReplication);  // k
  rule.addFactor({1, kNo, tb ? 0 : 1, kNo, 1}, {1, 1});                                // n
  return rule.build();
}

OpCost updateCost(const OpContext& c) { return perElementCost(c, c.def.id == OpId::adamw_update ? 12 : 4); }

// Every parameter-shaped operand and result shares the parameter's factors; step and the gradient
// scale have no dims.
ShardingRule updateSharding(const OpContext& c) {
  ShardingRuleBuilder rule(c.operands, c.results);
  rule.addPointwise(c.operands[0].shape);
  return rule.build();
}

// ---- Reference computations (PyTorch's documented updates, in double precision) ----

// The learning rate of both is lr times the schedule's factor at `step` (lr_schedule.h). Both read
// the gradient times its scale, when there is one, rounded to the gradient's dtype (as a mul would
// have stored it).
std::vector<double> scaledGradient(const OpContext& c, std::span<const TensorData* const> operands) {
  std::vector<double> g = referenceValues(*operands[1]);
  const int k = gradientScaleOperand(c);
  if (k < 0) return g;
  const double scale = referenceValues(*operands[static_cast<size_t>(k)])[0];
  for (double& x : g) x = c.operands[1].dtype == DType::kF32 ? static_cast<float>(x * scale) : x * scale;
  return g;
}

// torch.optim.SGD: d = g + weight_decay·w; with momentum, buf = d on the first step (step 0), else
// momentum·buf + (1 − dampening)·d, and d = nesterov ? d + momentum·buf : buf; w −= lr·d.
Expected<std::vector<TensorData>> sgdReference(const OpContext& c, std::span<const TensorData* const> operands) {
  std::vector<double> w = referenceValues(*operands[0]);
  const std::vector<double> g = scaledGradient(c, operands);
  const double step = referenceValues(*operands[2])[0];
  const bool has_buffer = c.getFloat("momentum") != 0.0;
  std::vector<double> buffer = has_buffer ? referenceValues(*operands[3]) : std::vector<double>{};
  const double lr = c.getFloat("lr") * lrScheduleOf(c).factor(static_cast<int64_t>(step));
  const double momentum = c.getFloat("momentum"), dampening = c.getFloat("dampening");
  const double weight_decay = c.getFloat("weight_decay");
  const bool nesterov = c.getInt("nesterov") == 1;
  for (size_t i = 0; i < w.size(); ++i) {
    double d = g[i] + weight_decay * w[i];
    if (has_buffer) {
      buffer[i] = step == 0 ? d : momentum * buffer[i] + (1 - dampening) * d;
      d = nesterov ? d + momentum * buffer[i] : buffer[i];
    }
    w[i] -= lr * d;
  }
  std::vector<TensorData> results = {referenceTensor(c.results[0], w)};
  if (has_buffer) results.push_back(referenceTensor(c.results[1], buffer));
  return results;
}

// torch.optim.AdamW at step t = step + 1: w ·= 1 − lr·weight_decay; m = β1·m + (1 − β1)·g;
// v = β2·v + (1 − β2)·g²; w −= lr·m̂ / (√v̂ + eps) with the bias-corrected m̂, v̂.
Expected<std::vector<TensorData>> adamwReference(const OpContext& c, std::span<const TensorData* const> operands) {
  std::vector<double> w = referenceValues(*operands[0]), m = referenceValues(*operands[2]);
  std::vector<double> v = referenceValues(*operands[3]);
  const std::vector<double> g = scaledGradient(c, operands);
  const double t = referenceValues(*operands[4])[0] + 1;
  const double lr = c.getFloat("lr") * lrScheduleOf(c).factor(static_cast<int64_t>(t) - 1);
  const double beta1 = c.getFloat("beta1"), beta2 = c.getFloat("beta2");
  const double eps = c.getFloat("eps"), weight_decay = c.getFloat("weight_decay");
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] *= 1 - lr * weight_decay;
    m[i] = beta1 * m[i] + (1 - beta1) * g[i];
    v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
    const double m_hat = m[i] / (1 - std::pow(beta1, t)), v_hat = v[i] / (1 - std::pow(beta2, t));
    w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
  return std::vector<TensorData>{referenceTensor(c.results[0], w), referenceTensor(c.results[1], m),
                                 referenceTensor(c.results[2], v)};
}

// sgd_matmul_update: sgdReference's update of the gradient op(a)·op(b), summed in double.
Expected<std::vector<TensorData>> sgdMatmulReference(const OpContext& c, std::span<const TensorData* const> operands) {
  const std::vector<double> a = referenceValues(*operands[1]), b = referenceValues(*operands[2]);
  const SgdMatmulGemm g = sgdMatmulGemm(c);
  std::vector<double> gradient(static_cast<size_t>(g.m * g.n));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < g.k; ++p)
        sum += a[static_cast<size_t>(g.transpose_a ? p * g.lda + i : i * g.lda + p)] *
               b[static_cast<size_t>(g.transpose_b ? j * g.ldb + p : p * g.ldb + j)];
      gradient[static_cast<size_t>(i * g.n + j)] = sum;
    }
  // sgd_update(w, gradient, step, [buf]) with the same attributes (no weight decay, no nesterov).
  const OpDef& sgd = opDef(OpId::sgd_update);
  const TensorType gradient_type{DType::kF64, c.operands[0].shape};  // not rounded to w's dtype
  std::vector<TensorType> types = {c.operands[0], gradient_type, c.operands[3]};
  const TensorData gradient_tensor = referenceTensor(gradient_type, gradient);
  std::vector<const TensorData*> sgd_operands = {operands[0], &gradient_tensor, operands[3]};
  if (c.operands.size() == 5) {
    types.push_back(c.operands[4]);
    sgd_operands.push_back(operands[4]);
  }
  return sgdReference(OpContext{sgd, types, c.results, c.attrs}, sgd_operands);
}

// `attrs` followed by the learning-rate schedule's.
std::vector<AttrSpec> withSchedule(std::vector<AttrSpec> attrs) {
  for (AttrSpec& spec : lrScheduleAttrSpecs()) attrs.push_back(std::move(spec));
  return attrs;
}

}  // namespace

SgdMatmulGemm sgdMatmulGemm(const OpContext& c) {
  SgdMatmulGemm gemm;
  gemm.transpose_a = c.getInt("transpose_a") != 0;
  gemm.transpose_b = c.getInt("transpose_b") != 0;
  gemm.m = c.operands[0].shape[0];
  gemm.n = c.operands[0].shape[1];
  gemm.lda = c.operands[1].shape[1];
  gemm.ldb = c.operands[2].shape[1];
  gemm.k = gemm.transpose_a ? c.operands[1].shape[0] : gemm.lda;
  return gemm;
}

int gradientScaleOperand(const OpContext& c) {
  size_t own = 5;  // adamw_update(w, g, m, v, step)
  if (c.def.id == OpId::sgd_update) own = c.getFloat("momentum") != 0.0 ? 4 : 3;  // sgd_update(w, g, step, [buf])
  return c.operands.size() > own ? static_cast<int>(own) : -1;
}

void addOptimizerOps(std::vector<OpDef>& table) {
  table.push_back(OpDef{OpId::sgd_update, "sgd_update", "one SGD step (PyTorch's rule: momentum, dampening, "
                                                        "weight decay, nesterov; lr scheduled by step)",
                        3, 5,
                        withSchedule({{"lr", AttrKind::kFloat, true, 0.0},
                                      {"momentum", AttrKind::kFloat, false, 0.0},
                                      {"dampening", AttrKind::kFloat, false, 0.0},
                                      {"weight_decay", AttrKind::kFloat, false, 0.0},
                                      {"nesterov", AttrKind::kInt, false, int64_t{0}}}),
                        checkedShapeRule<sgdShape>, checkedCostRule<updateCost>, checkedShardingRule<updateSharding>});
  table.push_back(OpDef{OpId::adamw_update, "adamw_update", "one AdamW step (PyTorch's rule and defaults; lr scheduled by step)", 5, 6,
                        withSchedule({{"lr", AttrKind::kFloat, false, 1e-3},
                                      {"beta1", AttrKind::kFloat, false, 0.9},
                                      {"beta2", AttrKind::kFloat, false, 0.999},
                                      {"eps", AttrKind::kFloat, false, 1e-8},
                                      {"weight_decay", AttrKind::kFloat, false, 1e-2}}),
                        checkedShapeRule<adamwShape>, checkedCostRule<updateCost>, checkedShardingRule<updateSharding>});
  table.push_back(OpDef{OpId::sgd_matmul_update, "sgd_matmul_update",
                        "one SGD step (momentum, dampening; no weight decay or nesterov) whose gradient is the "
                        "matrix product op(a)·op(b), summed into the parameter or its momentum buffer: the fusion "
                        "pass's fold of a weight gradient into its update (lr scheduled by step)",
                        4, 5,
                        withSchedule({{"lr", AttrKind::kFloat, true, 0.0},
                                      {"momentum", AttrKind::kFloat, false, 0.0},
                                      {"dampening", AttrKind::kFloat, false, 0.0},
                                      {"transpose_a", AttrKind::kInt, false, int64_t{0}},
                                      {"transpose_b", AttrKind::kInt, false, int64_t{0}}}),
                        checkedShapeRule<sgdMatmulShape>, checkedCostRule<sgdMatmulCost>,
                        checkedShardingRule<sgdMatmulSharding>});
  // The parameter and its states are updated in place.
  appendedDef(table, OpId::sgd_update).in_place = true;
  appendedDef(table, OpId::adamw_update).in_place = true;
  appendedDef(table, OpId::sgd_matmul_update).in_place = true;
  appendedDef(table, OpId::sgd_matmul_update).reference = sgdMatmulReference;
  appendedDef(table, OpId::sgd_matmul_update).reference_supports = referenceDTypes;
  appendedDef(table, OpId::sgd_update).reference = sgdReference;
  appendedDef(table, OpId::adamw_update).reference = adamwReference;
  appendedDef(table, OpId::sgd_update).reference_supports = referenceDTypes;
  appendedDef(table, OpId::adamw_update).reference_supports = referenceDTypes;
}

}  // namespace cleave::ops
