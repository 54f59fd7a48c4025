// Optimizers as graph ops: the --optimizer spec parser and the pass that appends parameter updates.
#include "passes/training/optimizer.h"

#include <cmath>
#include <set>
#include <vector>

#include "ir/gradient.h"
#include "ir/spec_items.h"
#include "passes/training/autodiff.h"

namespace cleave {
namespace {

constexpr const char* kSpecForm = "sgd[:key=value,...] or adamw[:key=value,...]";

Status specError(std::string_view text, const std::string& problem) {
  return Status::usage("bad optimizer '" + std::string(text) + "': " + problem);
}

Expected<double> parseNumber(std::string_view text, std::string_view key, std::string_view value) {
  std::optional<double> number = parseFiniteNumber(value);
  if (!number) return specError(text, "'" + std::string(key) + "' needs a finite number, got '" + std::string(value) + "'");
  return *number;
}

// Applies one key=value to `spec`; unknown keys list the optimizer's keys.
Status applyKey(std::string_view text, OptimizerSpec& spec, std::string_view key, std::string_view value) {
  if (key == "nesterov" && spec.kind == OptimizerKind::kSgd) {
    if (value == "1" || value == "true") spec.nesterov = true;
    else if (value == "0" || value == "false") spec.nesterov = false;
    else return specError(text, "'nesterov' needs 0 or 1, got '" + std::string(value) + "'");
    return Status::ok();
  }
  double* field = nullptr;
  if (key == "lr") field = &spec.lr;
  if (key == "weight_decay") field = &spec.weight_decay;
  if (spec.kind == OptimizerKind::kSgd) {
    if (key == "momentum") field = &spec.momentum;
    if (key == "dampening") field = &spec.dampening;
  } else {
    if (key == "beta1") field = &spec.beta1;
    if (key == "beta2") field = &spec.beta2;
    if (key == "eps") field = &spec.eps;
  }
  if (!field) {
    const char* keys = spec.kind == OptimizerKind::kSgd ? "lr, momentum, dampening, weight_decay (wd), nesterov"
                                                        : "lr, beta1, beta2, eps, weight_decay (wd)";
    return specError(text, "unknown key '" + std::string(key) + "' (keys: " + keys + ")");
  }
  CLEAVE_ASSIGN_OR_RETURN(*field, parseNumber(text, key, value));
  return Status::ok();
}

// The checks PyTorch's SGD and AdamW constructors make.
Status checkSpec(std::string_view text, const OptimizerSpec& spec) {
  if (spec.lr < 0) return specError(text, "lr must be >= 0");
  if (spec.weight_decay < 0) return specError(text, "weight_decay must be >= 0");
  if (spec.kind == OptimizerKind::kSgd) {
    if (spec.momentum < 0) return specError(text, "momentum must be >= 0");
    if (spec.nesterov && (spec.momentum <= 0 || spec.dampening != 0))
      return specError(text, "nesterov needs momentum > 0 and dampening 0");
  } else {
    if (spec.eps < 0) return specError(text, "eps must be >= 0");
    if (spec.beta1 < 0 || spec.beta1 >= 1 || spec.beta2 < 0 || spec.beta2 >= 1)
      return specError(text, "beta1 and beta2 must be in [0, 1)");
  }
  return Status::ok();
}

// A frozen parameter of zeros named `name` with `type`; an error when the name is taken. State of a
// parameter that is a block of a split tensor is the same block of the whole state (`like`).
Expected<ValueId> addState(Graph& graph, const std::string& name, const TensorType& type, const Param* like = nullptr) {
  if (graph.findValue(name) != kNoValue)
    return Status::badInput("optimizer: the model already has a value named '%" + name +
                            "', the name of an optimizer state");
  std::vector<int64_t> full_shape, shard_offset;
  std::vector<Param::ShardStep> shard_steps;
  HeldLayout model;
  if (like) {
    full_shape = like->full_shape;  // copied first: adding a parameter may move `like`
    shard_offset = like->shard_offset;
    shard_steps = like->shard_steps;
    model = like->model;
  }
  CLEAVE_ASSIGN_OR_RETURN(ValueId state, graph.addParam(name, type, Initializer{}, /*trainable=*/false));
  graph.params.back().full_shape = std::move(full_shape);
  graph.params.back().shard_offset = std::move(shard_offset);
  graph.params.back().shard_steps = std::move(shard_steps);
  graph.params.back().model = std::move(model);
  return state;
}

// Appends `op` updating `param` from `grad`, `step` and `states`, with an update line per result.
Status appendUpdate(Graph& graph, OpId op, ValueId param, ValueId grad, ValueId step, std::vector<ValueId> states,
                    AttrMap attrs) {
  std::vector<ValueId> operands = {param, grad, step};
  if (op == OpId::adamw_update) operands = {param, grad, states[0], states[1], step};
  else if (!states.empty()) operands.push_back(states[0]);
  std::vector<ValueId> targets = {param};
  targets.insert(targets.end(), states.begin(), states.end());
  std::vector<std::string> names;
  for (ValueId t : targets) names.push_back(graph.values[t].name + ".next");
  auto results = graph.addNode(op, std::move(operands), std::move(attrs), {}, std::move(names));
  if (!results) return results.status().withContext("optimizer: parameter '%" + graph.values[param].name + "': ");
  for (size_t i = 0; i < targets.size(); ++i) graph.updates.push_back({targets[i], (*results)[i]});
  return Status::ok();
}

}  // namespace

Expected<OptimizerSpec> parseOptimizerSpec(std::string_view text) {
  // 1. The optimizer name, before the first ':'.
  size_t colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  OptimizerSpec spec;
  if (name == "sgd") {
    spec.kind = OptimizerKind::kSgd;
  } else if (name == "adamw") {
    spec.kind = OptimizerKind::kAdamW;
    spec.lr = 1e-3;
    spec.weight_decay = 0.01;
  } else {
    return specError(text, "unknown optimizer '" + std::string(name) + "' (expected " + kSpecForm + ")");
  }
  // 2. key=value items separated by ',' or ';', each key at most once (wd is weight_decay).
  std::string_view rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<SpecItem> items,
                          splitSpecItems(rest, [&](const std::string& problem) { return specError(text, problem); }));
  std::set<std::string_view> seen;
  for (SpecItem item : items) {
    if (item.key == "wd") item.key = "weight_decay";
    if (!seen.insert(item.key).second) return specError(text, "'" + std::string(item.key) + "' is given twice");
    CLEAVE_TRY(applyKey(text, spec, item.key, item.value));
  }
  CLEAVE_TRY(checkSpec(text, spec));
  return spec;
}

bool isOptimizerUpdate(const Node& node) { return node.op == OpId::sgd_update || node.op == OpId::adamw_update; }

Status appendOptimizer(Graph& graph, const OptimizerSpec& spec) {
  // 1. The trainable parameters that have a gradient (a snapshot: state parameters are added below).
  std::vector<std::pair<ValueId, ValueId>> params_with_grads;
  for (const Param& p : graph.params) {
    ValueId grad = graph.findValue(gradientName(graph.values[p.value].name));
    if (p.trainable && grad != kNoValue) params_with_grads.emplace_back(p.value, grad);
  }
  if (params_with_grads.empty())
    return Status::badInput("optimizer: no trainable parameter has a gradient '%<param>.grad' (run autodiff first)");
  // 2. The step counter: steps already taken, incremented after each step.
  CLEAVE_ASSIGN_OR_RETURN(ValueId step, addState(graph, std::string(kStepParamName), TensorType{DType::kI64, {}}));
  auto one = graph.addNode(OpId::constant, {}, {{"value", scalarTensor(1.0, DType::kI64)}}, {}, {"one"});
  if (!one) return one.status();
  auto next_step = graph.addNode(OpId::add, {step, (*one)[0]}, {}, {}, {std::string(kStepParamName) + ".next"});
  if (!next_step) return next_step.status();
  graph.updates.push_back({step, (*next_step)[0]});
  // 3. One update per parameter, with its state.
  for (auto [param, grad] : params_with_grads) {
    const std::string param_name = graph.values[param].name;
    const TensorType type = graph.values[param].type;
    std::vector<ValueId> states;
    AttrMap attrs = {{"lr", spec.lr}, {"weight_decay", spec.weight_decay}};
    addLrScheduleAttrs(spec.schedule, attrs);
    if (spec.kind == OptimizerKind::kSgd) {
      if (spec.momentum != 0) {
        CLEAVE_ASSIGN_OR_RETURN(ValueId buffer, addState(graph, param_name + std::string(kMomentumSuffix), type, graph.findParam(param)));
        states.push_back(buffer);
        attrs.emplace("momentum", spec.momentum);
        attrs.emplace("dampening", spec.dampening);
        attrs.emplace("nesterov", int64_t{spec.nesterov ? 1 : 0});
      }
      CLEAVE_TRY(appendUpdate(graph, OpId::sgd_update, param, grad, step, std::move(states), std::move(attrs)));
    } else {
      CLEAVE_ASSIGN_OR_RETURN(ValueId exp_avg, addState(graph, param_name + std::string(kExpAvgSuffix), type, graph.findParam(param)));
      CLEAVE_ASSIGN_OR_RETURN(ValueId exp_avg_sq, addState(graph, param_name + std::string(kExpAvgSqSuffix), type, graph.findParam(param)));
      states = {exp_avg, exp_avg_sq};
      attrs.emplace("beta1", spec.beta1);
      attrs.emplace("beta2", spec.beta2);
      attrs.emplace("eps", spec.eps);
      CLEAVE_TRY(appendUpdate(graph, OpId::adamw_update, param, grad, step, std::move(states), std::move(attrs)));
    }
  }
  return Status::ok();
}

}  // namespace cleave
