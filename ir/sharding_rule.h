// ShardingRule: an op's operand and result dimensions mapped to shared factors (Shardy style).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave {

// How a factor behaves when it is split over a mesh axis.
enum class FactorKind : uint8_t {
  kPassThrough,      // split operands give split results (batch, m, n, channels)
  kReduction,        // summed over: split operands give a partial sum (matmul's k)
  kNeedReplication,  // cannot be split without communication inside the op (softmax axis)
};

// The factor form of an op instance, e.g. matmul: ([m,k],[k,n]) -> ([m,n]), k reduction.
// A sharding assigns mesh axes to factors; propagation reads these rules to fill in the rest.
struct ShardingRule {
  static constexpr int kNoFactor = -1;  // a dimension tied to no factor (e.g. broadcast size 1)

  std::vector<int64_t> factor_sizes;
  std::vector<FactorKind> factor_kinds;
  std::vector<std::vector<int>> operand_dims;  // per operand, per dimension: factor or kNoFactor
  std::vector<std::vector<int>> result_dims;   // per result, per dimension: factor or kNoFactor

  // Adds a factor and returns its index.
  int addFactor(int64_t size, FactorKind kind) {
    factor_sizes.push_back(size);
    factor_kinds.push_back(kind);
    return static_cast<int>(factor_sizes.size()) - 1;
  }
  int numFactors() const { return static_cast<int>(factor_sizes.size()); }
  // Text form, e.g. "([i,j],[j,k])->([i,k]) {j=reduction}"; factors named i, j, k, ...
  std::string str() const;
};

}  // namespace cleave
