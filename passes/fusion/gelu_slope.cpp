// GELU's slope computed in the forward pass for its gradient.
#include "passes/fusion/gelu_slope.h"

#include <numbers>
#include <string>

#include "ir/appended_nodes.h"
#include "ir/gradient.h"
#include "ir/op_table.h"

namespace cleave {
namespace {

// An f32 gelu or gelu_grad's approximation ("none" or "tanh"), or "" for another dtype.
std::string f32Approximation(const Graph& graph, const Node& node) {
  if (graph.values[node.results[0]].type.dtype != DType::kF32) return "";
  auto it = node.attrs.find("approximate");
  return it == node.attrs.end() ? "none" : std::get<std::string>(it->second);
}

// Appends nodes to the graph and remembers them, to be moved in front of the node they replace.
class Steps {
 public:
  Steps(Graph& graph, SourceLoc loc) : graph_(graph), loc_(std::move(loc)) {}

  Expected<ValueId> op(OpId op, std::vector<ValueId> operands, const std::string& name) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results, graph_.addNode(op, std::move(operands), {}, loc_, {name}));
    appended_.push_back(static_cast<int32_t>(graph_.nodes.size()) - 1);
    return results[0];
  }
  Expected<ValueId> constant(double value, const std::string& name) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph_.addNode(OpId::constant, {}, {{"value", scalarTensor(value, DType::kF32)}}, loc_, {name}));
    appended_.push_back(static_cast<int32_t>(graph_.nodes.size()) - 1);
    return results[0];
  }
  const std::vector<int32_t>& appended() const { return appended_; }

 private:
  Graph& graph_;
  SourceLoc loc_;
  std::vector<int32_t> appended_;
};

// The forward's values: gelu = half_x·one_plus, and the slope.
struct GeluSteps {
  ValueId half_x = kNoValue, one_plus = kNoValue, slope = kNoValue;
};

// The exact form: c = 1 + erf(x·√½); gelu = (x·0.5)·c; slope = c·0.5 + x·(exp((-0.5·x)·x)·(1/√(2π))).
Expected<GeluSteps> exactGeluSteps(Steps& forward, ValueId x, const std::string& name) {
  GeluSteps gelu;
  CLEAVE_ASSIGN_OR_RETURN(ValueId sqrt_half, forward.constant(std::numbers::sqrt2 / 2, name + ".sqrt_half"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId scaled, forward.op(OpId::mul, {x, sqrt_half}, name + ".scaled"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId erf, forward.op(OpId::erf, {scaled}, name + ".erf"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId one, forward.constant(1.0, name + ".one"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.one_plus, forward.op(OpId::add, {one, erf}, name + ".twice_cdf"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId half, forward.constant(0.5, name + ".half"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.half_x, forward.op(OpId::mul, {x, half}, name + ".half_x"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId cdf, forward.op(OpId::mul, {half, gelu.one_plus}, name + ".cdf"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId minus_half, forward.constant(-0.5, name + ".minus_half"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId half_square, forward.op(OpId::mul, {minus_half, x}, name + ".minus_half_x"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId exponent, forward.op(OpId::mul, {half_square, x}, name + ".exponent"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId gauss, forward.op(OpId::exp, {exponent}, name + ".gauss"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId norm,
                          forward.constant(std::numbers::inv_sqrtpi / std::numbers::sqrt2, name + ".inv_sqrt_2pi"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId pdf, forward.op(OpId::mul, {gauss, norm}, name + ".pdf"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId x_pdf, forward.op(OpId::mul, {x, pdf}, name + ".x_pdf"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.slope, forward.op(OpId::add, {cdf, x_pdf}, name + ".slope"));
  return gelu;
}

// The tanh form, tanh evaluated once: with β = √(2/π), κ = 0.044715,
// t = tanh(β·(x + κ·((x·x)·x))); gelu = (0.5·x)·(1 + t);
// slope = 0.5·(1 + t) + (((0.5·x)·(1 − t·t))·β)·(1 + 3κ·(x·x)).
Expected<GeluSteps> tanhGeluSteps(Steps& forward, ValueId x, const std::string& name) {
  GeluSteps gelu;
  const double beta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
  const double kappa = 0.044715f;
  CLEAVE_ASSIGN_OR_RETURN(ValueId x_sq, forward.op(OpId::mul, {x, x}, name + ".x_sq"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId cube, forward.op(OpId::mul, {x_sq, x}, name + ".cube"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId kappa_c, forward.constant(kappa, name + ".kappa"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId kappa_cube, forward.op(OpId::mul, {kappa_c, cube}, name + ".kappa_cube"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId sum, forward.op(OpId::add, {x, kappa_cube}, name + ".inner_sum"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId beta_c, forward.constant(beta, name + ".beta"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId inner, forward.op(OpId::mul, {beta_c, sum}, name + ".inner"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId t, forward.op(OpId::tanh, {inner}, name + ".tanh"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId one, forward.constant(1.0, name + ".one"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.one_plus, forward.op(OpId::add, {one, t}, name + ".one_plus_tanh"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId half, forward.constant(0.5, name + ".half"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.half_x, forward.op(OpId::mul, {half, x}, name + ".half_x"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId left_slope, forward.op(OpId::mul, {half, gelu.one_plus}, name + ".left_slope"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId t_sq, forward.op(OpId::mul, {t, t}, name + ".tanh_sq"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId sech_sq, forward.op(OpId::sub, {one, t_sq}, name + ".sech_sq"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId scaled, forward.op(OpId::mul, {gelu.half_x, sech_sq}, name + ".half_x_sech_sq"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId scaled_beta, forward.op(OpId::mul, {scaled, beta_c}, name + ".times_beta"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId three_kappa, forward.constant(3.0 * kappa, name + ".three_kappa"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId spread, forward.op(OpId::mul, {three_kappa, x_sq}, name + ".three_kappa_x_sq"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId d_inner, forward.op(OpId::add, {one, spread}, name + ".d_inner"));
  CLEAVE_ASSIGN_OR_RETURN(ValueId right_slope, forward.op(OpId::mul, {scaled_beta, d_inner}, name + ".right_slope"));
  CLEAVE_ASSIGN_OR_RETURN(gelu.slope, forward.op(OpId::add, {left_slope, right_slope}, name + ".slope"));
  return gelu;
}

}  // namespace

Expected<int> computeGeluSlopeInForward(Graph& graph, std::vector<int64_t>* node_group) {
  const bool grouped = node_group && !node_group->empty();
  if (grouped && node_group->size() != graph.nodes.size())
    return Status::internal("gelu slope: " + std::to_string(node_group->size()) + " node groups for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  const int32_t original = static_cast<int32_t>(graph.nodes.size());
  AppendedNodes placed(graph);  // each gelu's steps go in front of it (the gelu becomes a mul)
  int rewritten = 0;
  for (int32_t d = 0; d < original; ++d) {
    if (graph.nodes[d].op != OpId::gelu_grad) continue;
    const std::string approximation = f32Approximation(graph, graph.nodes[d]);
    if (approximation != "none" && approximation != "tanh") continue;
    const ValueId x = graph.nodes[d].operands[1];
    int32_t g = -1;
    for (int32_t u : users[x])
      if (u < d && graph.nodes[u].op == OpId::gelu &&
          f32Approximation(graph, graph.nodes[u]) == approximation)
        g = u;
    if (g < 0) continue;
    const std::string name = graph.values[graph.nodes[g].results[0]].name;
    Steps forward(graph, graph.nodes[g].loc);
    CLEAVE_ASSIGN_OR_RETURN(GeluSteps steps, approximation == "none" ? exactGeluSteps(forward, x, name)
                                                                      : tanhGeluSteps(forward, x, name));
    // Backward: dx = dy·slope (the gelu_grad node, rewritten).
    const ValueId dy = graph.nodes[d].operands[0];
    Node& gelu = graph.nodes[g];
    gelu.op = OpId::mul;
    gelu.operands = {steps.half_x, steps.one_plus};
    gelu.attrs.clear();
    Node& gradient = graph.nodes[d];
    gradient.op = OpId::mul;
    gradient.operands = {dy, steps.slope};
    gradient.attrs.clear();
    for (int32_t a : forward.appended()) placed.putBefore(static_cast<size_t>(g), static_cast<size_t>(a));
    ++rewritten;
  }
  if (rewritten == 0) return 0;
  placed.apply(graph, node_group);
  return rewritten;
}

}  // namespace cleave
