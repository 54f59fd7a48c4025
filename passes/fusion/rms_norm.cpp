// RMSNorm recognition: pow, reduce_mean, add, sqrt, div, mul, mul into rms_norm.
#include "passes/fusion/rms_norm.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "ir/constant_eval.h"
#include "ir/op_table.h"
#include "passes/fusion/single_reader_chain.h"

namespace cleave {
namespace {

class RmsNormMatcher {
 public:
  explicit RmsNormMatcher(const Graph& graph) : graph_(graph), chain_(graph) {}

  // What node `n` computes when it ends a decomposed RMSNorm: rms_norm(x, weight)[axis, epsilon],
  // weight kNoValue for a norm without one.
  struct Match {
    ValueId x, weight;
    int64_t axis;
    double epsilon;
  };

  // `y` = mul(weight, normalized) (either order), weight of x's normalised shape.
  std::optional<Match> matchWeighted(int32_t y) const {
    const Node& scale_mul = graph_.nodes[y];
    if (scale_mul.op != OpId::mul || scale_mul.operands.size() != 2) return std::nullopt;
    for (size_t k = 0; k < 2; ++k) {
      const ValueId normalized = scale_mul.operands[k], weight = scale_mul.operands[1 - k];
      const int32_t p = graph_.values[normalized].producer;
      if (p < 0 || chain_.producerReadOnlyBy(normalized, graph_.nodes[p].op, y) < 0) continue;
      auto found = matchNormalized(p);
      if (!found) continue;
      const TensorType& x = graph_.values[found->x].type;
      if (graph_.values[weight].type != TensorType{x.dtype, Shape(x.shape.begin() + found->axis, x.shape.end())}) continue;
      found->weight = weight;
      return found;
    }
    return std::nullopt;
  }

  // `n` = x · r (either order) with r = 1 / sqrt(a) or pow(a, -0.5), or n = x / sqrt(a); where
  // a = mean(x²) + eps (either order), the mean over x's last dims, kept.
  std::optional<Match> matchNormalized(int32_t n) const {
    const Node& node = graph_.nodes[n];
    if ((node.op != OpId::mul && node.op != OpId::div) || node.operands.size() != 2) return std::nullopt;
    for (size_t k = 0; k < (node.op == OpId::mul ? 2 : 1); ++k) {
      const ValueId x = node.operands[k], denominator = node.operands[1 - k];
      const TensorType& type = graph_.values[x].type;
      if ((type.dtype != DType::kF32 && type.dtype != DType::kF64) || type.rank() == 0 ||
          graph_.values[node.results[0]].type != type)
        continue;
      const int32_t a = node.op == OpId::mul ? shiftedMeanUnderReciprocalRoot(denominator, n)
                                             : shiftedMeanUnderRoot(denominator, n);
      if (a < 0) continue;
      std::optional<double> epsilon;
      ValueId mean = kNoValue;
      for (size_t e = 0; e < 2 && !epsilon; ++e) {
        epsilon = scalarConstantValue(graph_, graph_.nodes[a].operands[e]);
        mean = graph_.nodes[a].operands[1 - e];
      }
      if (!epsilon || *epsilon < 0) continue;
      const int32_t m = chain_.producerReadOnlyBy(mean, OpId::reduce_mean, a);
      if (m < 0) continue;
      const std::optional<int64_t> axis = meanedTrailingDims(graph_.nodes[m], type.rank());
      if (!axis || !isSquareOf(graph_.nodes[m].operands[0], x, m)) continue;
      return Match{x, kNoValue, *axis, *epsilon};
    }
    return std::nullopt;
  }

 private:
  // The add node a of `r` = div(1, sqrt(a)) or pow(a, -0.5), r read by `reader` alone; else -1.
  int32_t shiftedMeanUnderReciprocalRoot(ValueId r, int32_t reader) const {
    if (const int32_t d = chain_.producerReadOnlyBy(r, OpId::div, reader); d >= 0) {
      const Node& divide = graph_.nodes[d];
      if (scalarConstantValue(graph_, divide.operands[0]) != 1.0) return -1;
      return shiftedMeanUnderRoot(divide.operands[1], d);
    }
    if (const int32_t p = chain_.producerReadOnlyBy(r, OpId::pow, reader); p >= 0) {
      const Node& power = graph_.nodes[p];
      if (scalarConstantValue(graph_, power.operands[1]) != -0.5) return -1;
      return chain_.producerReadOnlyBy(power.operands[0], OpId::add, p);
    }
    return -1;
  }

  // The add node a of `s` = sqrt(a), s read by `reader` alone; else -1.
  int32_t shiftedMeanUnderRoot(ValueId s, int32_t reader) const {
    const int32_t root = chain_.producerReadOnlyBy(s, OpId::sqrt, reader);
    return root < 0 ? -1 : chain_.producerReadOnlyBy(graph_.nodes[root].operands[0], OpId::add, root);
  }

  // The first dim of a reduce_mean over the last dims of a rank-`rank` operand, keeping them
  // (axes in any order, negative or not); else nothing.
  std::optional<int64_t> meanedTrailingDims(const Node& node, int64_t rank) const {
    auto axes = node.attrs.find("axes");
    auto keepdims = node.attrs.find("keepdims");
    if (axes == node.attrs.end() || attrKind(axes->second) != AttrKind::kInts) return std::nullopt;
    if (keepdims != node.attrs.end() && std::get<int64_t>(keepdims->second) != 1) return std::nullopt;
    std::vector<int64_t> dims;
    for (int64_t a : std::get<std::vector<int64_t>>(axes->second)) {
      if (a < -rank || a >= rank) return std::nullopt;
      dims.push_back(a < 0 ? a + rank : a);
    }
    std::sort(dims.begin(), dims.end());
    if (dims.empty() || std::adjacent_find(dims.begin(), dims.end()) != dims.end() || dims.back() != rank - 1 ||
        dims.back() - dims.front() + 1 != static_cast<int64_t>(dims.size()))
      return std::nullopt;
    return dims.front();
  }

  // `p` is pow(x, 2) or mul(x, x), read by `reader` alone.
  bool isSquareOf(ValueId p, ValueId x, int32_t reader) const {
    if (const int32_t pow = chain_.producerReadOnlyBy(p, OpId::pow, reader); pow >= 0) {
      const Node& node = graph_.nodes[pow];
      auto exponent = scalarConstantValue(graph_, node.operands[1]);
      return node.operands[0] == x && exponent && *exponent == 2.0;
    }
    if (const int32_t mul = chain_.producerReadOnlyBy(p, OpId::mul, reader); mul >= 0)
      return graph_.nodes[mul].operands[0] == x && graph_.nodes[mul].operands[1] == x;
    return false;
  }

  const Graph& graph_;
  SingleReaderChain chain_;
};

// A tensor of ones of `type` (f32 or f64): the weight of a norm written without one.
std::shared_ptr<const TensorData> onesOf(const TensorType& type) {
  auto ones = std::make_shared<TensorData>();
  ones->type = type;
  ones->bytes.resize(static_cast<size_t>(type.bytes()));
  for (int64_t i = 0; i < type.numel(); ++i) {
    if (type.dtype == DType::kF32) ones->as<float>()[i] = 1.0f;
    else ones->as<double>()[i] = 1.0;
  }
  return ones;
}

}  // namespace

Expected<int> fuseRmsNorms(Graph& graph) {
  // 1. Every match, on the graph as it is (the chains of two matches share no node): norms with a
  // weight (their weight mul is the node replaced), then the other norms (their x·r).
  std::vector<std::pair<int32_t, RmsNormMatcher::Match>> matches;
  {
    const RmsNormMatcher matcher(graph);
    std::vector<bool> weighted(graph.nodes.size(), false);  // the x·r of a norm with a weight
    for (int32_t y = 0; y < static_cast<int32_t>(graph.nodes.size()); ++y)
      if (auto found = matcher.matchWeighted(y)) {
        matches.emplace_back(y, *found);
        for (ValueId v : graph.nodes[y].operands)
          if (v != found->weight) weighted[graph.values[v].producer] = true;
      }
    for (int32_t n = 0; n < static_cast<int32_t>(graph.nodes.size()); ++n)
      if (!weighted[n])
        if (auto found = matcher.matchNormalized(n)) matches.emplace_back(n, *found);
  }
  if (matches.empty()) return 0;
  // 2. Each replaced node becomes the rms_norm, a norm without a weight after a constant of ones
  // put in front of it; the chain before it is left unread (dce's).
  const int32_t original = static_cast<int32_t>(graph.nodes.size());
  std::vector<int32_t> ones_for(static_cast<size_t>(original), -1);  // the constant node to put in front of node i
  for (const auto& [i, found] : matches) {
    const TensorType x = graph.values[found.x].type;
    ValueId weight = found.weight;
    if (weight == kNoValue) {
      const TensorType type{x.dtype, Shape(x.shape.begin() + found.axis, x.shape.end())};
      const std::string name = graph.uniqueName(graph.values[graph.nodes[i].results[0]].name + ".weight");
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> ones,
                              graph.addNode(OpId::constant, {}, {{"value", onesOf(type)}}, graph.nodes[i].loc, {name}));
      weight = ones[0];
      ones_for[i] = static_cast<int32_t>(graph.nodes.size()) - 1;
    }
    Node& node = graph.nodes[i];
    node.op = OpId::rms_norm;
    node.operands = {found.x, weight};
    node.attrs = {{"epsilon", found.epsilon}};
    if (found.axis != x.rank() - 1) node.attrs["axis"] = found.axis - x.rank();
  }
  if (static_cast<int32_t>(graph.nodes.size()) > original) {
    std::vector<Node> nodes;
    nodes.reserve(graph.nodes.size());
    for (int32_t i = 0; i < original; ++i) {
      if (ones_for[i] >= 0) nodes.push_back(std::move(graph.nodes[ones_for[i]]));
      nodes.push_back(std::move(graph.nodes[i]));
    }
    graph.nodes = std::move(nodes);
    graph.compact();  // each value's producer, at its node's new index
  }
  return static_cast<int>(matches.size());
}

}  // namespace cleave
