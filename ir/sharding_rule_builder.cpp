// ShardingRuleBuilder: factor operations (pointwise, reduction, contraction, reshape) over a node's types.
#include "ir/sharding_rule_builder.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace cleave {

ShardingRuleBuilder::ShardingRuleBuilder(std::span<const TensorType> operands, std::span<const TensorType> results)
    : operands_(operands), results_(results) {
  for (const TensorType& t : operands) rule_.operand_dims.emplace_back(t.shape.size(), ShardingRule::kNoFactor);
  for (const TensorType& t : results) rule_.result_dims.emplace_back(t.shape.size(), ShardingRule::kNoFactor);
}

int ShardingRuleBuilder::newFactor(int64_t size, FactorKind kind) { return rule_.addFactor(size, kind); }

void ShardingRuleBuilder::mapDim(std::vector<int>& dims, int dim, int factor) {
  if (dim >= 0 && dim < static_cast<int>(dims.size())) dims[dim] = factor;
}

FactorKind ShardingRuleBuilder::kindOf(const DimKind& kind_of, int dim) {
  return kind_of ? kind_of(dim) : FactorKind::kPassThrough;
}

int ShardingRuleBuilder::addFactor(const std::vector<int>& operand_dims, const std::vector<int>& result_dims,
                                   FactorKind kind) {
  // The size of the first dim mapped, operands before results.
  auto firstSize = [](std::span<const TensorType> types, const std::vector<int>& dims) -> std::optional<int64_t> {
    for (size_t t = 0; t < dims.size() && t < types.size(); ++t)
      if (dims[t] >= 0 && dims[t] < static_cast<int>(types[t].shape.size())) return types[t].shape[dims[t]];
    return std::nullopt;
  };
  int64_t size = firstSize(operands_, operand_dims).value_or(firstSize(results_, result_dims).value_or(1));
  int f = newFactor(size, kind);
  for (size_t t = 0; t < operand_dims.size() && t < rule_.operand_dims.size(); ++t)
    mapDim(rule_.operand_dims[t], operand_dims[t], f);
  for (size_t t = 0; t < result_dims.size() && t < rule_.result_dims.size(); ++t)
    mapDim(rule_.result_dims[t], result_dims[t], f);
  return f;
}

int ShardingRuleBuilder::addOperandFactor(int operand, int dim, FactorKind kind) {
  std::vector<int> dims(static_cast<size_t>(std::max(operand + 1, 0)), kNoDim);
  if (operand >= 0) dims[operand] = dim;
  return addFactor(dims, {}, kind);
}

int ShardingRuleBuilder::addResultFactor(int result, int dim, FactorKind kind) {
  std::vector<int> dims(static_cast<size_t>(std::max(result + 1, 0)), kNoDim);
  if (result >= 0) dims[result] = dim;
  return addFactor({}, dims, kind);
}

std::vector<int> ShardingRuleBuilder::addPointwise(const Shape& shape, const DimKind& kind_of) {
  return addPointwiseIf(shape, [](int) { return true; }, kind_of);
}

std::vector<int> ShardingRuleBuilder::addPointwiseIf(const Shape& shape, const DimPredicate& pred,
                                                     const DimKind& kind_of) {
  std::vector<int> factors;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (!pred(d)) continue;
    int f = newFactor(shape[d], kindOf(kind_of, d));
    for (auto* all : {&rule_.operand_dims, &rule_.result_dims})
      for (std::vector<int>& dims : *all)
        if (dims.size() == shape.size()) dims[d] = f;
    factors.push_back(f);
  }
  return factors;
}

std::vector<int> ShardingRuleBuilder::addBroadcastingPointwise(const Shape& shape, const DimKind& kind_of) {
  std::vector<int> factors;
  const int rank = static_cast<int>(shape.size());
  for (int d = 0; d < rank; ++d) {
    int f = newFactor(shape[d], kindOf(kind_of, d));
    auto mapAligned = [&](std::span<const TensorType> types, std::vector<std::vector<int>>& all) {
      for (size_t t = 0; t < types.size(); ++t) {
        if (types[t].shape.size() > shape.size()) continue;  // it cannot broadcast to `shape`
        int dim = d - (rank - static_cast<int>(types[t].shape.size()));
        if (dim >= 0 && types[t].shape[dim] == shape[d]) all[t][dim] = f;
      }
    };
    mapAligned(operands_, rule_.operand_dims);
    mapAligned(results_, rule_.result_dims);
    factors.push_back(f);
  }
  return factors;
}

void ShardingRuleBuilder::addReduction(const std::vector<bool>& reduced, bool keepdims) {
  int out = 0;
  for (int d = 0; d < static_cast<int>(reduced.size()); ++d) {
    if (reduced[d]) {
      addFactor({d}, {}, FactorKind::kReduction);
      if (keepdims) ++out;
    } else {
      addFactor({d}, {out++});
    }
  }
}

void ShardingRuleBuilder::addContraction(bool transpose_lhs, bool transpose_rhs) {
  if (operands_.size() < 2 || results_.empty()) return;
  const int lhs_rank = static_cast<int>(operands_[0].shape.size());
  const int rhs_rank = static_cast<int>(operands_[1].shape.size());
  const int rank = static_cast<int>(results_[0].shape.size());
  if (lhs_rank < 2 || rhs_rank < 2 || rank < 2) return;
  const Shape& result = results_[0].shape;
  // Batch dims: an operand batch dim aligned from the right with a result batch dim of its size.
  for (int d = 0; d < rank - 2; ++d) {
    auto batchDim = [&](int operand_rank, const Shape& operand) {
      int dim = d - (rank - operand_rank);
      return dim >= 0 && operand[dim] == result[d] ? dim : kNoDim;
    };
    addFactor({batchDim(lhs_rank, operands_[0].shape), batchDim(rhs_rank, operands_[1].shape)}, {d});
  }
  addFactor({transpose_lhs ? lhs_rank - 1 : lhs_rank - 2}, {rank - 2});                                // m
  addFactor({transpose_lhs ? lhs_rank - 2 : lhs_rank - 1, transpose_rhs ? rhs_rank - 1 : rhs_rank - 2}, {},
            FactorKind::kReduction);                                                                  // k
  addFactor({kNoDim, transpose_rhs ? rhs_rank - 2 : rhs_rank - 1}, {rank - 1});                        // n
}

void ShardingRuleBuilder::addReshape() {
  if (operands_.empty() || results_.empty()) return;
  const Shape& in = operands_[0].shape;
  const Shape& out = results_[0].shape;
  const int in_rank = static_cast<int>(in.size()), out_rank = static_cast<int>(out.size());
  const int common = std::min(in_rank, out_rank);
  int prefix = 0;
  while (prefix < common && in[prefix] == out[prefix]) ++prefix;
  int suffix = 0;
  while (suffix < common - prefix && in[in_rank - 1 - suffix] == out[out_rank - 1 - suffix]) ++suffix;
  for (int d = 0; d < prefix; ++d) addFactor({d}, {d});
  for (int d = prefix; d < in_rank - suffix; ++d)
    if (in[d] != 1) addOperandFactor(0, d, FactorKind::kNeedReplication);
  for (int d = prefix; d < out_rank - suffix; ++d)
    if (out[d] != 1) addResultFactor(0, d, FactorKind::kNeedReplication);
  for (int s = 1; s <= suffix; ++s) addFactor({in_rank - s}, {out_rank - s});
}

void ShardingRuleBuilder::mapOperand(int operand, std::vector<int> factors) {
  if (operand < 0 || operand >= static_cast<int>(rule_.operand_dims.size())) return;
  factors.resize(rule_.operand_dims[operand].size(), ShardingRule::kNoFactor);
  rule_.operand_dims[operand] = std::move(factors);
}

void ShardingRuleBuilder::mapBroadcastOperand(int operand, int result) {
  if (operand < 0 || operand >= static_cast<int>(operands_.size()) || result < 0 ||
      result >= static_cast<int>(results_.size()))
    return;
  const Shape& from = operands_[operand].shape;
  const Shape& to = results_[result].shape;
  const int offset = static_cast<int>(to.size()) - static_cast<int>(from.size());
  for (int d = 0; d < static_cast<int>(from.size()); ++d)
    if (d + offset >= 0 && from[d] == to[d + offset]) rule_.operand_dims[operand][d] = rule_.result_dims[result][d + offset];
}

}  // namespace cleave
