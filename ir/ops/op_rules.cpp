// Building blocks shared by the op family files: attribute specs, operand checks, diagnostics, costs, sharding.
#include "ir/ops/op_rules.h"

namespace cleave::ops {

OpDef& appendedDef(std::vector<OpDef>& table, OpId id) {
  for (OpDef& def : table)
    if (def.id == id) return def;
  OpDef& nameless = table.emplace_back();  // the table check reports it
  nameless.id = id;
  return nameless;
}

AttrSpec optionalInt(std::string name, int64_t default_value) {
  return AttrSpec{std::move(name), AttrKind::kInt, false, default_value};
}
AttrSpec optionalFloat(std::string name, double default_value) {
  return AttrSpec{std::move(name), AttrKind::kFloat, false, default_value};
}
AttrSpec optionalString(std::string name, std::string default_value) {
  return AttrSpec{std::move(name), AttrKind::kString, false, std::move(default_value)};
}
AttrSpec optionalInts(std::string name, std::vector<int64_t> default_value) {
  return AttrSpec{std::move(name), AttrKind::kInts, false, std::move(default_value)};
}

AttrSpec optionalFloats(std::string name, std::vector<double> default_value) {
  return AttrSpec{std::move(name), AttrKind::kFloats, false, std::move(default_value)};
}

AttrSpec requiredAttr(std::string name, AttrKind kind) {
  Attribute empty;
  switch (kind) {
    case AttrKind::kInt: empty = int64_t{0}; break;
    case AttrKind::kFloat: empty = 0.0; break;
    case AttrKind::kString: empty = std::string(); break;
    case AttrKind::kInts: empty = std::vector<int64_t>(); break;
    case AttrKind::kFloats: empty = std::vector<double>(); break;
    case AttrKind::kTensor: empty = std::shared_ptr<const TensorData>(); break;
  }
  return AttrSpec{std::move(name), kind, true, std::move(empty)};
}

namespace {
std::string opPrefix(const OpContext& ctx) { return std::string(ctx.def.name) + ": "; }
}  // namespace

Status operandShapeError(const OpContext& ctx, int operand, const std::string& problem) {
  return Status::badInput(opPrefix(ctx) + "operand " + std::to_string(operand) + " has shape " +
                          shapeStr(ctx.operands[operand].shape) + ", " + problem);
}

Status operandDTypeError(const OpContext& ctx, int operand, const std::string& problem) {
  return Status::badInput(opPrefix(ctx) + "operand " + std::to_string(operand) + " has dtype " +
                          std::string(dtypeName(ctx.operands[operand].dtype)) + ", " + problem);
}

Status attrError(const OpContext& ctx, std::string_view attr, const std::string& problem) {
  return Status::badInput(opPrefix(ctx) + "attribute '" + std::string(attr) + "' " + problem);
}

std::string intsStr(std::span<const int64_t> values) { return shapeStr(Shape(values.begin(), values.end())); }

std::optional<int64_t> checkedProduct(std::span<const int64_t> dims) {
  int64_t product = 1;
  bool has_zero = false;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(product, d, &product)) return std::nullopt;
  }
  return has_zero ? 0 : product;
}

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

namespace {
// Why `type`'s shape is unusable, or "" when it is fine: a negative dim, or too many bytes.
std::string shapeProblem(const TensorType& type) {
  for (size_t i = 0; i < type.shape.size(); ++i)
    if (type.shape[i] < 0) return "its dim " + std::to_string(i) + " is negative";
  // Product of the non-zero dims times the element size must fit, so no partial product overflows.
  Shape non_zero;
  for (int64_t d : type.shape)
    if (d != 0) non_zero.push_back(d);
  non_zero.push_back(dtypeSize(type.dtype));
  if (!checkedProduct(non_zero)) return "which has more bytes than fit in int64";
  return "";
}
}  // namespace

Status checkOperandShapes(const OpContext& ctx) {
  for (size_t i = 0; i < ctx.operands.size(); ++i) {
    std::string problem = shapeProblem(ctx.operands[i]);
    if (!problem.empty()) return operandShapeError(ctx, static_cast<int>(i), problem);
  }
  return Status::ok();
}

Status checkResultShape(const OpContext& ctx, int result, const TensorType& type) {
  std::string problem = shapeProblem(type);
  if (problem.empty()) return Status::ok();
  return Status::badInput(opPrefix(ctx) + "result " + std::to_string(result) + " would have shape " +
                          shapeStr(type.shape) + ", " + problem);
}

Status requireRank(const OpContext& ctx, int operand, int64_t min_rank, int64_t max_rank) {
  int64_t rank = ctx.operands[operand].rank();
  if (rank >= min_rank && (max_rank < 0 || rank <= max_rank)) return Status::ok();
  std::string want = min_rank == max_rank ? "rank " + std::to_string(min_rank)
                     : max_rank < 0       ? "rank >= " + std::to_string(min_rank)
                                          : "rank " + std::to_string(min_rank) + " to " + std::to_string(max_rank);
  return operandShapeError(ctx, operand, "needs " + want);
}

Status requireFloat(const OpContext& ctx, int operand) {
  if (isFloat(ctx.operands[operand].dtype)) return Status::ok();
  return operandDTypeError(ctx, operand, "needs a float dtype (f32, f16, bf16, f64)");
}

Status requireNumeric(const OpContext& ctx, int operand) {
  DType d = ctx.operands[operand].dtype;
  if (isFloat(d) || isInteger(d)) return Status::ok();
  return operandDTypeError(ctx, operand, "needs a float or integer dtype");
}

Status requireIndexType(const OpContext& ctx, int operand) {
  DType d = ctx.operands[operand].dtype;
  if (d == DType::kI64 || d == DType::kI32) return Status::ok();
  return operandDTypeError(ctx, operand, "needs i64 or i32");
}

Status requireSameDType(const OpContext& ctx, int operand, int reference) {
  if (ctx.operands[operand].dtype == ctx.operands[reference].dtype) return Status::ok();
  return operandDTypeError(ctx, operand,
                           "needs operand " + std::to_string(reference) + "'s dtype " +
                               std::string(dtypeName(ctx.operands[reference].dtype)));
}

Status requireShape(const OpContext& ctx, int operand, const Shape& shape, const std::string& expected_what) {
  if (ctx.operands[operand].shape == shape) return Status::ok();
  return operandShapeError(ctx, operand, "needs " + shapeStr(shape) + " (" + expected_what + ")");
}

Status requireFlag(const OpContext& ctx, std::string_view attr) {
  int64_t v = ctx.getInt(attr);
  if (v == 0 || v == 1) return Status::ok();
  return attrError(ctx, attr, "is " + std::to_string(v) + ", must be 0 or 1");
}

Expected<int64_t> resolveAxis(const OpContext& ctx, std::string_view attr, int64_t rank, int operand) {
  int64_t axis = ctx.getInt(attr);
  int64_t resolved = normalizeAxis(axis, rank);
  if (resolved < 0)
    return attrError(ctx, attr,
                     "is " + std::to_string(axis) + ", out of range for operand " + std::to_string(operand) +
                         " of rank " + std::to_string(rank));
  return resolved;
}

Expected<std::vector<int64_t>> resolveAxes(const OpContext& ctx, std::string_view attr, int64_t rank,
                                           const std::string& rank_of) {
  const std::vector<int64_t>& axes = ctx.getInts(attr);
  std::vector<int64_t> resolved;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    int64_t a = normalizeAxis(axis, rank);
    if (a < 0)
      return attrError(ctx, attr,
                       "has " + std::to_string(axis) + ", out of range for " + rank_of + " of rank " +
                           std::to_string(rank));
    if (seen[a]) return attrError(ctx, attr, "names axis " + std::to_string(axis) + " twice");
    seen[a] = true;
    resolved.push_back(a);
  }
  return resolved;
}

bool isIdentityPermutation(std::span<const int64_t> perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Expected<Shape> broadcastOperands(const OpContext& ctx, std::initializer_list<int> operands) {
  Shape result;
  std::string earlier;  // the operands broadcast so far, for the message: "operand 0", "operands 0,1"
  int num_earlier = 0;
  for (int i : operands) {
    const Shape& shape = ctx.operands[i].shape;
    Shape next;
    if (!broadcastShapes(result, shape, next)) {
      // Name the first dim, counting from the right, that does not broadcast.
      int64_t rank_r = static_cast<int64_t>(result.size()), rank_s = static_cast<int64_t>(shape.size());
      int64_t k = 1;
      while (result[rank_r - k] == shape[rank_s - k] || result[rank_r - k] == 1 || shape[rank_s - k] == 1) ++k;
      std::string whose = num_earlier == 1 ? "operand " + earlier : "the broadcast of operands " + earlier;
      return operandShapeError(ctx, i,
                               "its dim -" + std::to_string(k) + " (" + std::to_string(shape[rank_s - k]) +
                                   ") does not broadcast with " + whose + "'s dim -" + std::to_string(k) + " (" +
                                   std::to_string(result[rank_r - k]) + ")");
    }
    result = std::move(next);
    earlier += (num_earlier++ ? "," : "") + std::to_string(i);
  }
  return result;
}

std::vector<TensorType> inferredResults(const OpContext& ctx) {
  auto results = inferResultTypes(ctx.def, ctx.operands, ctx.attrs);
  return results ? std::move(results).value() : std::vector<TensorType>{};
}

double operandAndResultBytes(const OpContext& ctx, std::span<const TensorType> results) {
  double bytes = 0;
  for (const auto& t : ctx.operands) bytes += static_cast<double>(t.bytes());
  for (const auto& t : results) bytes += static_cast<double>(t.bytes());
  return bytes;
}

OpCost perElementCost(const OpContext& ctx, double flops_per_element) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {flops_per_element * static_cast<double>(results[0].numel()), operandAndResultBytes(ctx, results)};
}

ShardingRule broadcastShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addBroadcastingPointwise(results[0].shape);
  return rule.build();
}

}  // namespace cleave::ops
