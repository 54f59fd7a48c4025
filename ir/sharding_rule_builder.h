// ShardingRuleBuilder: an op's sharding rule declared factor by factor (Shardy's OpShardingRuleBuilder).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "ir/sharding_rule.h"
#include "ir/tensor_type.h"

namespace cleave {

// Builds a ShardingRule for one node from its operand and result types. Every dim starts tied to no
// factor; each operation adds factors (in call order, which is the rule's factor order) and maps them
// to operand and result dims. A reference to an operand, result or dim the node lacks is skipped, so an
// optional operand (gemm's c, conv2d's bias) can be named whether or not the node has it.
class ShardingRuleBuilder {
 public:
  static constexpr int kNoDim = -1;  // in a dim list: this operand or result does not take the factor

  // The kind of the factor added for dim `dim` of a shape.
  using DimKind = std::function<FactorKind(int dim)>;
  // Whether dim `dim` of a shape gets a factor.
  using DimPredicate = std::function<bool(int dim)>;

  // A builder for a node with these operand and result types.
  ShardingRuleBuilder(std::span<const TensorType> operands, std::span<const TensorType> results);

  // Adds a factor mapped to dim operand_dims[i] of operand i and dim result_dims[j] of result j
  // (kNoDim, or no entry: not mapped). Its size is that of the first dim it maps (operands first).
  // Returns its index.
  int addFactor(const std::vector<int>& operand_dims, const std::vector<int>& result_dims,
                FactorKind kind = FactorKind::kPassThrough);
  // Adds a factor mapped to dim `dim` of operand `operand` only; returns its index.
  int addOperandFactor(int operand, int dim, FactorKind kind = FactorKind::kPassThrough);
  // Adds a factor mapped to dim `dim` of result `result` only; returns its index.
  int addResultFactor(int result, int dim, FactorKind kind = FactorKind::kPassThrough);

  // Pointwise: one factor per dim d of `shape`, of kind kind_of(d) (pass-through by default), mapped
  // to dim d of every operand and result whose rank is shape's. Returns the factors.
  std::vector<int> addPointwise(const Shape& shape, const DimKind& kind_of = {});
  // As addPointwise, for the dims d where pred(d) holds only.
  std::vector<int> addPointwiseIf(const Shape& shape, const DimPredicate& pred, const DimKind& kind_of = {});
  // Pointwise with numpy broadcasting: one factor per dim of `shape` (the broadcast shape), mapped to
  // the dims of every operand and result aligned with it from the right that have its size (a size-1
  // dim broadcast against a larger one is not mapped; a tensor of higher rank is not mapped at all).
  // Returns the factors.
  std::vector<int> addBroadcastingPointwise(const Shape& shape, const DimKind& kind_of = {});

  // Reduction of operand 0 into result 0: one factor per operand dim, in order; a dim where
  // reduced[d] holds is a reduction factor, mapped to no result dim (the result keeps it as an
  // unmapped size-1 dim when keepdims, drops it otherwise); every other dim passes through to the
  // result's next dim.
  void addReduction(const std::vector<bool>& reduced, bool keepdims);
  // Contraction of a (batched) matrix product, operand 0 x operand 1 -> result 0 (each transposed in
  // its last two dims when asked): the result's batch dims (pass-through, broadcasting operand batch
  // dims as numpy does), then m (pass-through), k (reduction) and n (pass-through).
  void addContraction(bool transpose_lhs, bool transpose_rhs);
  // Reshape of operand 0 into result 0. Row-major order means a run of equal leading dims, and a run
  // of equal trailing dims, map element blocks one to one: those are pass-through factors. The dims
  // between them are merged or split: each gets a need_replication factor of its own (size-1 dims get
  // none). Factor order: leading run, operand's middle dims, result's middle dims, trailing run from
  // the last dim backwards.
  void addReshape();

  // Operand `operand`'s dims take `factors`, one per dim.
  void mapOperand(int operand, std::vector<int> factors);
  // Operand `operand` takes the factors of result `result`'s dims it broadcasts against: dims aligned
  // from the right with the same size (a broadcast size-1 dim is not mapped).
  void mapBroadcastOperand(int operand, int result);

  // The rule built so far.
  ShardingRule build() const { return rule_; }

 private:
  int newFactor(int64_t size, FactorKind kind);
  // Maps dim `dim` of `dims` (one tensor's dim list) to `factor`, when the dim exists.
  static void mapDim(std::vector<int>& dims, int dim, int factor);
  static FactorKind kindOf(const DimKind& kind_of, int dim);

  std::span<const TensorType> operands_;
  std::span<const TensorType> results_;
  ShardingRule rule_;
};

}  // namespace cleave
