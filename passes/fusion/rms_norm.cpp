// RMSNorm recognition: pow, reduce_mean, add, sqrt, div, mul, mul into rms_norm.
#include "passes/fusion/rms_norm.h"

#include <optional>

#include "ir/constant_eval.h"
#include "ir/op_table.h"

namespace cleave {
namespace {

class RmsNormMatcher {
 public:
  explicit RmsNormMatcher(const Graph& graph) : graph_(graph), users_(graph.computeUsers()) {
    is_root_.assign(graph.values.size(), false);
    for (ValueId v : graph.outputs) is_root_[v] = true;
    for (const StateUpdate& update : graph.updates) is_root_[update.new_value] = true;
  }

  // The node producing `v` when it is an `op` whose one result only `reader` reads; else -1.
  int32_t producerReadOnlyBy(ValueId v, OpId op, int32_t reader) const {
    const int32_t p = graph_.values[v].producer;
    if (p < 0 || graph_.nodes[p].op != op || is_root_[v] || users_[v].size() != 1 || users_[v][0] != reader) return -1;
    return p;
  }

  // What the weight mul `y` computes when it ends a decomposed RMSNorm: rms_norm(x, weight).
  struct Match {
    ValueId x, weight;
    double epsilon;
  };
  std::optional<Match> match(int32_t y) const {
    const Node& scale_mul = graph_.nodes[y];
    if (scale_mul.op != OpId::mul || scale_mul.operands.size() != 2) return std::nullopt;
    for (size_t k = 0; k < 2; ++k) {
      const ValueId normalized = scale_mul.operands[k], weight = scale_mul.operands[1 - k];
      const int32_t n = producerReadOnlyBy(normalized, OpId::mul, y);
      if (n < 0) continue;
      if (auto found = matchNormalized(n, weight)) return found;
    }
    return std::nullopt;
  }

 private:
  // n = mul(x, r) (either order) with r = div(1, sqrt(add(reduce_mean(x²), eps))).
  std::optional<Match> matchNormalized(int32_t n, ValueId weight) const {
    const Node& node = graph_.nodes[n];
    for (size_t k = 0; k < 2; ++k) {
      const ValueId x = node.operands[k], reciprocal = node.operands[1 - k];
      const TensorType& type = graph_.values[x].type;
      if ((type.dtype != DType::kF32 && type.dtype != DType::kF64) || type.rank() == 0 ||
          graph_.values[node.results[0]].type != type || graph_.values[weight].type != TensorType{type.dtype, {type.shape.back()}})
        continue;
      const int32_t r = producerReadOnlyBy(reciprocal, OpId::div, n);
      if (r < 0) continue;
      const Node& divide = graph_.nodes[r];  // div(1, s)
      if (scalarConstantValue(graph_, divide.operands[0]) != 1.0) continue;
      const int32_t s = producerReadOnlyBy(divide.operands[1], OpId::sqrt, r);
      if (s < 0) continue;
      const int32_t a = producerReadOnlyBy(graph_.nodes[s].operands[0], OpId::add, s);
      if (a < 0) continue;
      std::optional<double> epsilon;
      ValueId mean = kNoValue;
      for (size_t e = 0; e < 2 && !epsilon; ++e) {
        epsilon = scalarConstantValue(graph_, graph_.nodes[a].operands[e]);
        mean = graph_.nodes[a].operands[1 - e];
      }
      if (!epsilon || *epsilon < 0) continue;
      const int32_t m = producerReadOnlyBy(mean, OpId::reduce_mean, a);
      if (m < 0 || !meansLastAxis(graph_.nodes[m], type.rank())) continue;
      if (!isSquareOf(graph_.nodes[m].operands[0], x, m)) continue;
      return Match{x, weight, *epsilon};
    }
    return std::nullopt;
  }

  // reduce_mean over the last axis alone, keeping it.
  bool meansLastAxis(const Node& node, int64_t rank) const {
    auto axes = node.attrs.find("axes");
    auto keepdims = node.attrs.find("keepdims");
    if (axes == node.attrs.end() || attrKind(axes->second) != AttrKind::kInts) return false;
    const auto& list = std::get<std::vector<int64_t>>(axes->second);
    const bool kept = keepdims == node.attrs.end() || std::get<int64_t>(keepdims->second) == 1;
    return kept && list.size() == 1 && (list[0] == -1 || list[0] == rank - 1);
  }

  // `p` is pow(x, 2) or mul(x, x), read by `reader` alone.
  bool isSquareOf(ValueId p, ValueId x, int32_t reader) const {
    if (const int32_t pow = producerReadOnlyBy(p, OpId::pow, reader); pow >= 0) {
      const Node& node = graph_.nodes[pow];
      auto exponent = scalarConstantValue(graph_, node.operands[1]);
      return node.operands[0] == x && exponent && *exponent == 2.0;
    }
    if (const int32_t mul = producerReadOnlyBy(p, OpId::mul, reader); mul >= 0)
      return graph_.nodes[mul].operands[0] == x && graph_.nodes[mul].operands[1] == x;
    return false;
  }

  const Graph& graph_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> is_root_;
};

}  // namespace

Expected<int> fuseRmsNorms(Graph& graph) {
  // 1. Every match, on the graph as it is (the chains of two matches share no node).
  std::vector<std::pair<int32_t, RmsNormMatcher::Match>> matches;
  {
    const RmsNormMatcher matcher(graph);
    for (int32_t y = 0; y < static_cast<int32_t>(graph.nodes.size()); ++y)
      if (auto found = matcher.match(y)) matches.emplace_back(y, *found);
  }
  // 2. Each weight mul becomes the rms_norm; the chain before it is left unread (dce's).
  for (const auto& [y, found] : matches) {
    Node& node = graph.nodes[y];
    node.op = OpId::rms_norm;
    node.operands = {found.x, found.weight};
    node.attrs = {{"epsilon", found.epsilon}};
  }
  return static_cast<int>(matches.size());
}

}  // namespace cleave
