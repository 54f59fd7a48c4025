// GELU recognition: the erf or tanh chain of an exported GELU into gelu.
#include "passes/fusion/gelu_recognition.h"

#include <array>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/constant_eval.h"
#include "ir/op_table.h"
#include "passes/fusion/single_reader_chain.h"

namespace cleave {
namespace {

constexpr double kBeta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // √(2/π)
constexpr double kKappa = 0.044715;

class GeluMatcher {
 public:
  explicit GeluMatcher(const Graph& graph) : graph_(graph), chain_(graph) {}

  struct Match {
    ValueId x;
    bool tanh;  // the tanh form (else erf)
  };

  // `y` = x · 0.5 · p, its three factors in any order and grouping: y = mul(a, mul(b, c)) or
  // mul(mul(a, b), c), the inner mul read by y alone.
  std::optional<Match> match(int32_t y) const {
    const Node& node = graph_.nodes[y];
    if (node.op != OpId::mul || node.operands.size() != 2) return std::nullopt;
    const TensorType& type = graph_.values[node.results[0]].type;
    if (type.dtype != DType::kF32 && type.dtype != DType::kF64) return std::nullopt;
    for (size_t k = 0; k < 2; ++k) {
      const int32_t inner = chain_.producerReadOnlyBy(node.operands[k], OpId::mul, y);
      if (inner < 0 || graph_.nodes[inner].operands.size() != 2) continue;
      const std::vector<ValueId>& pair = graph_.nodes[inner].operands;
      // Each factor with the node that reads it.
      const std::array<std::pair<ValueId, int32_t>, 3> factors = {
          std::pair{node.operands[1 - k], y}, std::pair{pair[0], inner}, std::pair{pair[1], inner}};
      if (auto found = matchFactors(factors, type)) return found;
    }
    return std::nullopt;
  }

 private:
  // `v` is a scalar constant equal to `expected` at f32 precision (the exporters write f32 constants).
  bool isConstant(ValueId v, double expected) const {
    const std::optional<double> value = scalarConstantValue(graph_, v);
    return value && static_cast<float>(*value) == static_cast<float>(expected);
  }

  // One factor the constant 0.5, one p = 1 + erf(…) or 1 + tanh(…) of x, the third x itself (of y's type).
  std::optional<Match> matchFactors(const std::array<std::pair<ValueId, int32_t>, 3>& factors,
                                    const TensorType& type) const {
    for (size_t half = 0; half < 3; ++half) {
      if (!isConstant(factors[half].first, 0.5)) continue;
      for (size_t p = 0; p < 3; ++p) {
        if (p == half) continue;
        const ValueId x = factors[3 - half - p].first;
        if (graph_.values[x].type != type) continue;
        if (auto tanh = onePlusOf(factors[p].first, factors[p].second, x)) return Match{x, *tanh};
      }
    }
    return std::nullopt;
  }

  // Whether `p` (read by `reader` alone) is 1 + erf(x/√2) (false) or 1 + tanh(β(x + κx³)) (true).
  std::optional<bool> onePlusOf(ValueId p, int32_t reader, ValueId x) const {
    const int32_t add = chain_.producerReadOnlyBy(p, OpId::add, reader);
    if (add < 0) return std::nullopt;
    const std::vector<ValueId>& operands = graph_.nodes[add].operands;
    for (size_t k = 0; k < 2; ++k) {
      if (!isConstant(operands[1 - k], 1.0)) continue;
      if (const int32_t erf = chain_.producerReadOnlyBy(operands[k], OpId::erf, add); erf >= 0) {
        if (isScaledBySqrtHalf(graph_.nodes[erf].operands[0], erf, x)) return false;
      } else if (const int32_t tanh = chain_.producerReadOnlyBy(operands[k], OpId::tanh, add); tanh >= 0) {
        if (isTanhArgument(graph_.nodes[tanh].operands[0], tanh, x)) return true;
      }
    }
    return std::nullopt;
  }

  // `u` = x / √2 or x · (1/√2) (either order), read by `reader` alone.
  bool isScaledBySqrtHalf(ValueId u, int32_t reader, ValueId x) const {
    if (const int32_t div = chain_.producerReadOnlyBy(u, OpId::div, reader); div >= 0) {
      const std::vector<ValueId>& operands = graph_.nodes[div].operands;
      return operands[0] == x && isConstant(operands[1], std::numbers::sqrt2);
    }
    return isProduct(u, reader, x, std::numbers::sqrt2 / 2);
  }

  // `v` = β · (x + κ · x³), or (x · β) · (1 + κ · x²) as Hugging Face's FastGELUActivation and
  // BLOOM's gelu write it, each mul and add in either order, read by `reader` alone.
  bool isTanhArgument(ValueId v, int32_t reader, ValueId x) const {
    const int32_t scale = chain_.producerReadOnlyBy(v, OpId::mul, reader);
    if (scale < 0) return false;
    const std::vector<ValueId>& scaled = graph_.nodes[scale].operands;
    for (size_t k = 0; k < 2; ++k) {
      if (!isConstant(scaled[1 - k], kBeta)) continue;
      const int32_t sum = chain_.producerReadOnlyBy(scaled[k], OpId::add, scale);
      if (sum < 0) return false;
      const std::vector<ValueId>& terms = graph_.nodes[sum].operands;
      for (size_t t = 0; t < 2; ++t) {
        if (terms[t] != x) continue;
        const int32_t cubic = chain_.producerReadOnlyBy(terms[1 - t], OpId::mul, sum);
        if (cubic < 0) continue;
        const std::vector<ValueId>& parts = graph_.nodes[cubic].operands;
        for (size_t c = 0; c < 2; ++c)
          if (isConstant(parts[1 - c], kKappa) && isCube(parts[c], cubic, x)) return true;
      }
    }
    for (size_t k = 0; k < 2; ++k)
      if (isProduct(scaled[k], scale, x, kBeta) && isOnePlusKappaSquare(scaled[1 - k], scale, x)) return true;
    return false;
  }

  // `v` = 1 + κ · x², κ · x² as (κ · x) · x or κ · (x · x), each in either order, read by `reader` alone.
  bool isOnePlusKappaSquare(ValueId v, int32_t reader, ValueId x) const {
    const int32_t sum = chain_.producerReadOnlyBy(v, OpId::add, reader);
    if (sum < 0) return false;
    const std::vector<ValueId>& terms = graph_.nodes[sum].operands;
    for (size_t t = 0; t < 2; ++t) {
      if (!isConstant(terms[1 - t], 1.0)) continue;
      const int32_t product = chain_.producerReadOnlyBy(terms[t], OpId::mul, sum);
      if (product < 0) continue;
      const std::vector<ValueId>& parts = graph_.nodes[product].operands;
      for (size_t p = 0; p < 2; ++p) {
        if (parts[1 - p] == x && isProduct(parts[p], product, x, kKappa)) return true;
        if (isConstant(parts[1 - p], kKappa) && isSquare(parts[p], product, x)) return true;
      }
    }
    return false;
  }

  // `v` = x · x, read by `reader` alone.
  bool isSquare(ValueId v, int32_t reader, ValueId x) const {
    const int32_t square = chain_.producerReadOnlyBy(v, OpId::mul, reader);
    return square >= 0 && graph_.nodes[square].operands[0] == x && graph_.nodes[square].operands[1] == x;
  }

  // `v` = x · constant (either order), read by `reader` alone.
  bool isProduct(ValueId v, int32_t reader, ValueId x, double constant) const {
    const int32_t mul = chain_.producerReadOnlyBy(v, OpId::mul, reader);
    if (mul < 0) return false;
    const std::vector<ValueId>& operands = graph_.nodes[mul].operands;
    return (operands[0] == x && isConstant(operands[1], constant)) ||
           (operands[1] == x && isConstant(operands[0], constant));
  }

  // `c` = pow(x, 3), or (x · x) · x in either order, read by `reader` alone.
  bool isCube(ValueId c, int32_t reader, ValueId x) const {
    if (const int32_t pow = chain_.producerReadOnlyBy(c, OpId::pow, reader); pow >= 0) {
      const std::vector<ValueId>& operands = graph_.nodes[pow].operands;
      return operands[0] == x && isConstant(operands[1], 3.0);
    }
    const int32_t mul = chain_.producerReadOnlyBy(c, OpId::mul, reader);
    if (mul < 0) return false;
    const std::vector<ValueId>& operands = graph_.nodes[mul].operands;
    for (size_t k = 0; k < 2; ++k)
      if (operands[1 - k] == x && isSquare(operands[k], mul, x)) return true;
    return false;
  }

  const Graph& graph_;
  SingleReaderChain chain_;
};

}  // namespace

Expected<int> fuseGelus(Graph& graph) {
  // Every match on the graph as it is (two matches share no node: each step is read by the next
  // alone), then each y rewritten; the chains before them are left unread.
  std::vector<std::pair<int32_t, GeluMatcher::Match>> matches;
  {
    const GeluMatcher matcher(graph);
    for (int32_t y = 0; y < static_cast<int32_t>(graph.nodes.size()); ++y)
      if (auto found = matcher.match(y)) matches.emplace_back(y, *found);
  }
  for (const auto& [y, found] : matches) {
    Node& node = graph.nodes[y];
    node.op = OpId::gelu;
    node.operands = {found.x};
    node.attrs.clear();
    if (found.tanh) node.attrs["approximate"] = std::string("tanh");
  }
  return static_cast<int>(matches.size());
}

}  // namespace cleave
