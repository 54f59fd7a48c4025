// ShardingRule: text form.
#include "ir/sharding_rule.h"

namespace cleave {
namespace {
std::string factorName(int f) {
  if (f == ShardingRule::kNoFactor) return "1";
  std::string s(1, static_cast<char>('i' + f % 18));
  if (f >= 18) s += std::to_string(f / 18);
  return s;
}
std::string dimsStr(const std::vector<std::vector<int>>& all) {
  std::string s = "(";
  for (size_t t = 0; t < all.size(); ++t) {
    if (t) s += ",";
    s += "[";
    for (size_t d = 0; d < all[t].size(); ++d) s += (d ? "," : "") + factorName(all[t][d]);
    s += "]";
  }
  return s + ")";
}
}  // namespace

std::string ShardingRule::str() const {
  std::string s = dimsStr(operand_dims) + "->" + dimsStr(result_dims);
  std::string special;
  for (int f = 0; f < numFactors(); ++f) {
    if (factor_kinds[f] == FactorKind::kPassThrough) continue;
    special += (special.empty() ? "" : ",") + factorName(f) +
               (factor_kinds[f] == FactorKind::kReduction ? "=reduction" : "=need_replication");
  }
  return special.empty() ? s : s + " {" + special + "}";
}

}  // namespace cleave
