// Reverse-mode automatic differentiation over the graph, one gradient rule per op.
#include "passes/autodiff.h"

#include <unordered_set>

#include "ir/gradient.h"

namespace cleave {
namespace {

// The state of one appendBackward call.
class BackwardBuilder {
 public:
  BackwardBuilder(Graph& graph, ValueId loss)
      : graph_(graph),
        loss_(loss),
        forward_values_(graph.values.size()),
        forward_nodes_(graph.nodes.size()),
        source_param_(forward_values_, kNoValue),
        feeds_loss_(forward_values_, false),
        contributions_(forward_values_) {}

  Status run(const std::vector<ValueId>& wrt) {
    // 1. Mark the values on a path from a parameter to the loss.
    markPaths(wrt);
    if (source_param_[loss_] == kNoValue)
      return Status::badInput("autodiff: the loss '%" + graph_.values[loss_].name +
                              "' depends on no trainable parameter");
    // 2. Seed: d loss / d loss = 1.
    const Value& loss = graph_.values[loss_];
    auto seed = graph_.addNode(OpId::constant, {}, {{"value", scalarTensor(1.0, loss.type.dtype)}}, nodeLocOf(loss_),
                               {loss.name + ".grad"});
    if (!seed) return seed.status();
    contributions_[loss_].push_back((*seed)[0]);
    named_.insert((*seed)[0]);
    // 3. Walk the forward nodes backwards, running each on-path node's gradient rule.
    for (size_t i = forward_nodes_; i-- > 0;) CLEAVE_TRY(differentiateNode(i));
    // 4. Give each parameter's gradient its name, then drop backward nodes nothing needs.
    std::vector<ValueId> roots;
    for (ValueId param : wrt) {
      CLEAVE_ASSIGN_OR_RETURN(ValueId grad, nameParameterGradient(param));
      if (grad != kNoValue) roots.push_back(grad);
    }
    eraseUnusedBackwardNodes(roots);
    return Status::ok();
  }

 private:
  SourceLoc nodeLocOf(ValueId v) const {
    int32_t producer = graph_.values[v].producer;
    return producer >= 0 ? graph_.nodes[producer].loc : SourceLoc{};
  }

  bool isBackwardValue(ValueId v) const { return graph_.values[v].producer >= static_cast<int32_t>(forward_nodes_); }

  // Sets source_param_[v] (a parameter v depends on through float values) and feeds_loss_[v].
  void markPaths(const std::vector<ValueId>& wrt) {
    for (ValueId param : wrt)
      if (isFloat(graph_.values[param].type.dtype)) source_param_[param] = param;
    for (size_t i = 0; i < forward_nodes_; ++i) {
      const Node& node = graph_.nodes[i];
      ValueId source = kNoValue;
      for (ValueId v : node.operands)
        if (source == kNoValue) source = source_param_[v];
      if (source == kNoValue) continue;
      // Integer and bool results carry no gradient: the path ends there.
      for (ValueId r : node.results)
        if (isFloat(graph_.values[r].type.dtype)) source_param_[r] = source;
    }
    feeds_loss_[loss_] = true;
    for (size_t i = forward_nodes_; i-- > 0;) {
      const Node& node = graph_.nodes[i];
      bool feeds = false;
      for (ValueId r : node.results) feeds = feeds || feeds_loss_[r];
      if (feeds)
        for (ValueId v : node.operands) feeds_loss_[v] = true;
    }
  }

  bool onPath(ValueId v) const { return source_param_[v] != kNoValue && feeds_loss_[v]; }

  Status differentiateNode(size_t index) {
    const Node node = graph_.nodes[index];  // a copy: rules append to graph_.nodes
    std::vector<ValueId> result_grads;
    bool any_gradient = false;
    for (ValueId r : node.results) {
      ValueId grad = onPath(r) ? accumulate(r) : kNoValue;
      if (!isOk()) return status_;
      result_grads.push_back(grad);
      any_gradient = any_gradient || grad != kNoValue;
    }
    if (!any_gradient) return Status::ok();
    const OpDef& def = opDef(node.op);
    if (!def.gradient) {
      ValueId on_path_result = node.results[0];
      for (ValueId r : node.results)
        if (onPath(r)) on_path_result = r;
      return Status::badInput(nodeContext(graph_, node) + "op '" + std::string(def.name) +
                              "' is not differentiable, but it lies between the parameter '%" +
                              graph_.values[source_param_[on_path_result]].name + "' and the loss '%" +
                              graph_.values[loss_].name + "'");
    }
    GradientContext context(graph_, node, std::move(result_grads));
    CLEAVE_TRY(def.gradient(context));
    CLEAVE_TRY(context.status);
    for (size_t j = 0; j < node.operands.size(); ++j) {
      ValueId operand = node.operands[j];
      ValueId grad = context.operand_grads[j];
      if (grad == kNoValue || !onPath(operand)) continue;
      if (graph_.values[grad].type != graph_.values[operand].type)
        return Status::internal(nodeContext(graph_, node) + "its gradient rule gave operand " + std::to_string(j) +
                                " a gradient of type " + graph_.values[grad].type.str() + ", the operand is " +
                                graph_.values[operand].type.str());
      contributions_[operand].push_back(grad);
    }
    return Status::ok();
  }

  // The total gradient of forward value `v`: its contributions added left to right, in the order the
  // reverse walk produced them. A backward value becomes "<v>.grad" unless it already names another
  // value's gradient. kNoValue when nothing contributed.
  ValueId accumulate(ValueId v) {
    const std::vector<ValueId>& parts = contributions_[v];
    if (parts.empty()) return kNoValue;
    ValueId total = parts[0];
    for (size_t k = 1; k < parts.size(); ++k) {
      auto sum = graph_.addNode(OpId::add, {total, parts[k]}, {}, nodeLocOf(v));
      if (!sum) {
        status_ = sum.status();
        return kNoValue;
      }
      total = (*sum)[0];
    }
    if (isBackwardValue(total) && named_.insert(total).second) {
      status_ = graph_.renameValue(total, graph_.uniqueName(graph_.values[v].name + ".grad"));
    }
    return total;
  }

  // Names `param`'s gradient gradientName(param) and returns it (kNoValue when the loss does not
  // depend on it). A gradient that is already another parameter's is copied with an identity.
  Expected<ValueId> nameParameterGradient(ValueId param) {
    ValueId grad = accumulate(param);
    if (!isOk()) return status_;
    if (grad == kNoValue) return kNoValue;
    const std::string name = gradientName(graph_.values[param].name);
    if (!isBackwardValue(grad) || param_gradients_.count(grad)) {
      auto copy = graph_.addNode(OpId::identity, {grad}, {}, {}, {name});
      if (!copy) return copy.status();
      grad = (*copy)[0];
    }
    CLEAVE_TRY(graph_.renameValue(grad, name));
    param_gradients_.insert(grad);
    return grad;
  }

  void eraseUnusedBackwardNodes(const std::vector<ValueId>& roots) {
    std::vector<bool> needed(graph_.values.size(), false);
    for (ValueId v : roots) needed[v] = true;
    for (ValueId v : graph_.outputs) needed[v] = true;
    for (const StateUpdate& u : graph_.updates) needed[u.new_value] = true;
    std::vector<bool> unused(graph_.nodes.size(), false);
    bool any_unused = false;
    for (size_t i = graph_.nodes.size(); i-- > forward_nodes_;) {
      const Node& node = graph_.nodes[i];
      bool used = false;
      for (ValueId r : node.results) used = used || needed[r];
      if (used) {
        for (ValueId v : node.operands) needed[v] = true;
      } else {
        unused[i] = any_unused = true;
      }
    }
    // Backward values come after every forward value, so erasing them keeps the forward ids.
    if (any_unused) graph_.eraseNodes(unused);
  }

  bool isOk() const { return status_.isOk(); }

  Graph& graph_;
  const ValueId loss_;
  const size_t forward_values_;
  const size_t forward_nodes_;
  std::vector<ValueId> source_param_;             // per forward value: a parameter it depends on, or kNoValue
  std::vector<bool> feeds_loss_;                  // per forward value: the loss depends on it
  std::vector<std::vector<ValueId>> contributions_;  // per forward value: gradients from its users
  std::unordered_set<ValueId> named_;             // backward values already named as some value's gradient
  std::unordered_set<ValueId> param_gradients_;   // values named as a parameter's gradient
  Status status_;
};

}  // namespace

std::string gradientName(std::string_view param_name) { return std::string(param_name) + ".grad"; }

Status appendBackward(Graph& graph, ValueId loss, const AutodiffOptions& options) {
  if (loss < 0 || loss >= static_cast<ValueId>(graph.values.size()))
    return Status::internal("autodiff: the loss is not a value of the graph");
  const Value& loss_value = graph.values[loss];
  if (!isFloat(loss_value.type.dtype) || loss_value.type.rank() != 0)
    return Status::badInput("autodiff: the loss '%" + loss_value.name + "' must be a float scalar, got " +
                            loss_value.type.str());
  std::vector<ValueId> wrt = options.wrt;
  if (wrt.empty())
    for (const Param& p : graph.params)
      if (p.trainable) wrt.push_back(p.value);
  for (ValueId param : wrt) {
    if (param < 0 || param >= static_cast<ValueId>(graph.values.size()) || !graph.findParam(param))
      return Status::internal("autodiff: a value to differentiate with respect to is not a parameter");
    const std::string name = gradientName(graph.values[param].name);
    if (graph.findValue(name) != kNoValue)
      return Status::badInput("autodiff: the gradient of parameter '%" + graph.values[param].name +
                              "' is named '%" + name + "', but the graph already has a value of that name");
  }
  return BackwardBuilder(graph, loss).run(wrt);
}

}  // namespace cleave
