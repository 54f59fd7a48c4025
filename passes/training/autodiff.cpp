// Reverse-mode automatic differentiation over the graph, one gradient rule per op.
#include "passes/training/autodiff.h"

#include <unordered_set>

#include "ir/gradient.h"

namespace cleave {
namespace {

// The state of one backward pass (appendBackward or appendSeededBackward).
class BackwardBuilder {
 public:
  explicit BackwardBuilder(Graph& graph)
      : graph_(graph),
        forward_values_(graph.values.size()),
        forward_nodes_(graph.nodes.size()),
        source_(forward_values_, kNoValue),
        feeds_seed_(forward_values_, kNoValue),
        contributions_(forward_values_),
        total_(forward_values_, kNoValue),
        accumulated_(forward_values_, false) {}

  // Marks the values on a path from a source (a parameter of `wrt_params` or a value of
  // `wrt_values`) to a seed: source_[v] is a source v depends on through float values, feeds_seed_[v]
  // a seed that depends on v.
  void markPaths(const std::vector<BackwardSeed>& seeds, const std::vector<ValueId>& wrt_params,
                 const std::vector<ValueId>& wrt_values) {
    for (const std::vector<ValueId>* sources : {&wrt_params, &wrt_values})
      for (ValueId v : *sources)
        if (isFloat(graph_.values[v].type.dtype)) source_[v] = v;
    for (size_t i = 0; i < forward_nodes_; ++i) {
      const Node& node = graph_.nodes[i];
      ValueId source = kNoValue;
      for (ValueId v : node.operands)
        if (source == kNoValue) source = source_[v];
      if (source == kNoValue) continue;
      // Integer and bool results carry no gradient: the path ends there.
      for (ValueId r : node.results)
        if (isFloat(graph_.values[r].type.dtype) && source_[r] == kNoValue) source_[r] = source;
    }
    for (const BackwardSeed& seed : seeds)
      if (feeds_seed_[seed.value] == kNoValue) feeds_seed_[seed.value] = seed.value;
    for (size_t i = forward_nodes_; i-- > 0;) {
      const Node& node = graph_.nodes[i];
      ValueId seed = kNoValue;
      for (ValueId r : node.results)
        if (seed == kNoValue) seed = feeds_seed_[r];
      if (seed == kNoValue) continue;
      for (ValueId v : node.operands)
        if (feeds_seed_[v] == kNoValue) feeds_seed_[v] = seed;
    }
  }

  // True when `v` depends on a source through float values (after markPaths).
  bool dependsOnASource(ValueId v) const { return source_[v] != kNoValue; }

  // Appends the backward pass of `seeds` and returns the gradients of `wrt_values` (kNoValue where
  // none), after naming the parameters' gradients and erasing backward nodes nothing needs.
  Expected<std::vector<ValueId>> differentiate(const std::vector<BackwardSeed>& seeds,
                                               const std::vector<ValueId>& wrt_params,
                                               const std::vector<ValueId>& wrt_values) {
    // 1. Seed each value with its cotangent; a missing cotangent is a constant 1 named "<value>.grad".
    for (const BackwardSeed& seed : seeds) {
      if (!onPath(seed.value)) continue;
      ValueId cotangent = seed.cotangent;
      if (cotangent == kNoValue) {
        const Value& value = graph_.values[seed.value];
        auto one = graph_.addNode(OpId::constant, {}, {{"value", scalarTensor(1.0, value.type.dtype)}},
                                  nodeLocOf(seed.value), {value.name + ".grad"});
        if (!one) return one.status();
        cotangent = (*one)[0];
        named_.insert(cotangent);
        loss_seeds_.insert(seed.value);
      }
      contributions_[seed.value].push_back(cotangent);
    }
    // 2. Walk the forward nodes backwards, running each on-path node's gradient rule.
    for (size_t i = forward_nodes_; i-- > 0;) CLEAVE_TRY(differentiateNode(i));
    // 3. Give each parameter's gradient its name and collect the requested values' gradients.
    std::vector<ValueId> roots;
    for (ValueId param : wrt_params) {
      CLEAVE_ASSIGN_OR_RETURN(ValueId grad, nameParameterGradient(param));
      if (grad != kNoValue) roots.push_back(grad);
    }
    std::vector<std::string> value_gradient_names;
    for (ValueId v : wrt_values) {
      ValueId grad = onPath(v) ? accumulate(v) : kNoValue;
      if (!isOk()) return status_;
      value_gradient_names.push_back(grad == kNoValue ? std::string() : graph_.values[grad].name);
      if (grad != kNoValue) roots.push_back(grad);
    }
    // 4. Drop backward nodes nothing needs; ids of backward values change, so look gradients up by name.
    eraseUnusedBackwardNodes(roots);
    std::vector<ValueId> value_gradients;
    for (const std::string& name : value_gradient_names)
      value_gradients.push_back(name.empty() ? kNoValue : graph_.findValue(name));
    return value_gradients;
  }

 private:
  SourceLoc nodeLocOf(ValueId v) const {
    int32_t producer = graph_.values[v].producer;
    return producer >= 0 ? graph_.nodes[producer].loc : SourceLoc{};
  }

  bool isBackwardValue(ValueId v) const { return graph_.values[v].producer >= static_cast<int32_t>(forward_nodes_); }

  bool onPath(ValueId v) const { return source_[v] != kNoValue && feeds_seed_[v] != kNoValue; }

  Status differentiateNode(size_t index) {
    const Node node = graph_.nodes[index];  // a copy: rules append to graph_.nodes
    bool operand_on_path = false;
    for (ValueId v : node.operands) operand_on_path = operand_on_path || onPath(v);
    if (!operand_on_path) return Status::ok();  // nothing to pass a gradient to (e.g. a received value)
    if (castsEachPartBack(node)) return isOk() ? Status::ok() : status_;
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
    if (def.stops_gradient) return Status::ok();  // detach: its operands get nothing from here
    if (!def.gradient) {
      ValueId on_path_result = node.results[0];
      for (ValueId r : node.results)
        if (onPath(r)) on_path_result = r;
      ValueId source = source_[on_path_result], seed = feeds_seed_[on_path_result];
      return Status::badInput(nodeContext(graph_, node) + "op '" + std::string(def.name) +
                              "' is not differentiable, but it lies between the " +
                              (graph_.findParam(source) ? "parameter" : "value") + " '%" + graph_.values[source].name +
                              "' and the " + (loss_seeds_.count(seed) ? "loss" : "differentiated value") + " '%" +
                              graph_.values[seed].name + "'");
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

  // A cast to a narrower float (mixed precision's bf16 copy of a weight) read several times, by
  // several microbatches: each part of its gradient is cast back to the operand's dtype, and the
  // parts are summed there (in f32), as PyTorch accumulates .grad over backward passes, instead of
  // summing them in bf16 first. True when it did so.
  bool castsEachPartBack(const Node& node) {
    if (node.op != OpId::cast || node.results.size() != 1 || !onPath(node.operands[0])) return false;
    const ValueId x = node.operands[0], r = node.results[0];
    const DType from = graph_.values[x].type.dtype, to = graph_.values[r].type.dtype;
    if (!isFloat(from) || !isFloat(to) || dtypeSize(to) >= dtypeSize(from) || contributions_[r].size() < 2) return false;
    accumulated_[r] = true;
    for (ValueId part : contributions_[r]) {
      auto wide = graph_.addNode(OpId::cast, {part}, {{"to", std::string(dtypeName(from))}}, graph_.nodes[graph_.values[r].producer].loc);
      if (!wide) {
        status_ = wide.status();
        return true;
      }
      contributions_[x].push_back((*wide)[0]);
    }
    return true;
  }

  // The total gradient of forward value `v` (computed once): its contributions added one by one,
  // last produced first, so in the forward program order of v's users. A shared parameter of an
  // unrolled pipeline stage then sums microbatch 0's gradient first: the schedule can add each
  // microbatch's gradient as soon as its backward step ends and free it, instead of keeping one
  // gradient copy per microbatch until the last. A backward value becomes "<v>.grad" unless it
  // already names another value's gradient. kNoValue when nothing contributed.
  ValueId accumulate(ValueId v) {
    if (accumulated_[v]) return total_[v];
    accumulated_[v] = true;
    const std::vector<ValueId>& parts = contributions_[v];
    if (parts.empty()) return kNoValue;
    ValueId total = parts.back();
    for (size_t k = parts.size() - 1; k-- > 0;) {
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
    total_[v] = total;
    return total;
  }

  // Names `param`'s gradient gradientName(param) and returns it (kNoValue when no seed depends on
  // it). A gradient that is not a backward value of its own is copied with an identity.
  Expected<ValueId> nameParameterGradient(ValueId param) {
    ValueId grad = onPath(param) ? accumulate(param) : kNoValue;
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
      bool used = opDef(node.op).side_effects;
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
  const size_t forward_values_;
  const size_t forward_nodes_;
  std::vector<ValueId> source_;                      // per forward value: a source it depends on, or kNoValue
  std::vector<ValueId> feeds_seed_;                  // per forward value: a seed that depends on it, or kNoValue
  std::vector<std::vector<ValueId>> contributions_;  // per forward value: gradients from seeds and users
  std::vector<ValueId> total_;                       // per forward value: its accumulated gradient
  std::vector<bool> accumulated_;                    // per forward value: total_ is computed
  std::unordered_set<ValueId> named_;                // backward values already named as some value's gradient
  std::unordered_set<ValueId> param_gradients_;      // values named as a parameter's gradient
  std::unordered_set<ValueId> loss_seeds_;           // seeds differentiated from a constant 1 (losses)
  Status status_;
};

bool isValueOf(const Graph& graph, ValueId v) { return v >= 0 && v < static_cast<ValueId>(graph.values.size()); }

// The parameters to differentiate: `wrt`, or every trainable one when empty; checks that each is a
// parameter whose gradient name is free.
Expected<std::vector<ValueId>> parametersToDifferentiate(const Graph& graph, const std::vector<ValueId>& wrt) {
  std::vector<ValueId> params = wrt;
  if (params.empty())
    for (const Param& p : graph.params)
      if (p.trainable) params.push_back(p.value);
  for (ValueId param : params) {
    if (!isValueOf(graph, param) || !graph.findParam(param))
      return Status::internal("autodiff: a value to differentiate with respect to is not a parameter");
    const std::string name = gradientName(graph.values[param].name);
    if (graph.findValue(name) != kNoValue)
      return Status::badInput("autodiff: the gradient of parameter '%" + graph.values[param].name +
                              "' is named '%" + name + "', but the graph already has a value of that name");
  }
  return params;
}

}  // namespace

std::string gradientName(std::string_view param_name) { return std::string(param_name) + ".grad"; }

Status appendBackward(Graph& graph, ValueId loss, const AutodiffOptions& options) {
  if (!isValueOf(graph, loss)) return Status::internal("autodiff: the loss is not a value of the graph");
  const Value& loss_value = graph.values[loss];
  if (!isFloat(loss_value.type.dtype) || loss_value.type.rank() != 0)
    return Status::badInput("autodiff: the loss '%" + loss_value.name + "' must be a float scalar, got " +
                            loss_value.type.str());
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> params, parametersToDifferentiate(graph, options.wrt));
  const std::vector<BackwardSeed> seeds = {{loss, kNoValue}};
  BackwardBuilder builder(graph);
  builder.markPaths(seeds, params, {});
  if (!builder.dependsOnASource(loss))
    return Status::badInput("autodiff: the loss '%" + graph.values[loss].name + "' depends on no trainable parameter");
  auto value_gradients = builder.differentiate(seeds, params, {});
  return value_gradients.status();
}

Expected<std::vector<ValueId>> appendSeededBackward(Graph& graph, const SeededBackwardOptions& options) {
  for (const BackwardSeed& seed : options.seeds) {
    if (!isValueOf(graph, seed.value)) return Status::internal("autodiff: a seed is not a value of the graph");
    const Value& value = graph.values[seed.value];
    if (seed.cotangent == kNoValue) {
      if (!isFloat(value.type.dtype) || value.type.rank() != 0)
        return Status::badInput("autodiff: the loss '%" + value.name + "' must be a float scalar, got " +
                                value.type.str());
    } else if (!isValueOf(graph, seed.cotangent) || graph.values[seed.cotangent].type != value.type) {
      return Status::internal("autodiff: the cotangent of '%" + value.name + "' is not a value of its type " +
                              value.type.str());
    }
  }
  for (ValueId v : options.wrt_values)
    if (!isValueOf(graph, v)) return Status::internal("autodiff: a value to differentiate with respect to is not in the graph");
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> params, parametersToDifferentiate(graph, options.wrt_params));
  BackwardBuilder builder(graph);
  builder.markPaths(options.seeds, params, options.wrt_values);
  return builder.differentiate(options.seeds, params, options.wrt_values);
}

}  // namespace cleave
