// Graph: construction, lookup, use replacement and node removal.
#include "ir/graph.h"

#include <algorithm>
#include <utility>

namespace cleave {

bool isInitializerKind(std::string_view kind) {
  static constexpr std::string_view kKinds[] = {"zeros",          "ones",          "constant",
                                                "normal",         "uniform",       "xavier_uniform",
                                                "xavier_normal",  "kaiming_uniform", "kaiming_normal",
                                                "data"};
  return std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds);
}

ValueId Graph::newValue(const std::string& value_name, TensorType type) {
  ValueId id = static_cast<ValueId>(values.size());
  values.push_back(Value{value_name, std::move(type), -1, 0});
  by_name_.emplace(value_name, id);
  return id;
}

Expected<ValueId> Graph::addInput(const std::string& value_name, TensorType type) {
  if (findValue(value_name) != kNoValue) return Status::badInput("value '%" + value_name + "' is defined twice");
  ValueId id = newValue(value_name, std::move(type));
  inputs.push_back(id);
  return id;
}

Expected<ValueId> Graph::addParam(const std::string& value_name, TensorType type, Initializer init,
                                  bool trainable) {
  if (findValue(value_name) != kNoValue) return Status::badInput("value '%" + value_name + "' is defined twice");
  ValueId id = newValue(value_name, std::move(type));
  params.push_back(Param{.value = id, .init = std::move(init), .trainable = trainable});
  if (param_position_.size() + 1 == params.size()) param_position_.emplace(id, params.size() - 1);
  return id;
}

Expected<std::vector<ValueId>> Graph::addNode(OpId op, std::vector<ValueId> operands, AttrMap attrs, SourceLoc loc,
                                              std::vector<std::string> result_names) {
  std::vector<TensorType> operand_types;
  for (ValueId v : operands) {
    if (v < 0 || v >= static_cast<ValueId>(values.size()))
      return Status::internal(std::string(opName(op)) + ": operand is not a value of this graph");
    operand_types.push_back(values[v].type);
  }
  auto types = inferResultTypes(opDef(op), operand_types, attrs);
  if (!types) {
    std::string where = loc.known() ? loc.str() + ": " : "";
    return types.status().withContext(where);
  }
  // Result names are unique in the graph and among this node's results (uniqueName only knows the graph's).
  std::vector<std::string> names;
  for (size_t i = 0; i < types->size(); ++i) {
    std::string hint = i < result_names.size() ? result_names[i] : std::string(opName(op));
    std::string name = uniqueName(hint);
    for (int64_t k = 1; std::find(names.begin(), names.end(), name) != names.end(); ++k)
      name = uniqueName(hint + "_" + std::to_string(k));
    names.push_back(std::move(name));
  }
  return addNodeWithTypes(op, std::move(operands), std::move(attrs), std::move(loc), std::move(names),
                          std::move(*types));
}

Expected<std::vector<ValueId>> Graph::addNodeWithTypes(OpId op, std::vector<ValueId> operands, AttrMap attrs,
                                                       SourceLoc loc, std::vector<std::string> result_names,
                                                       std::vector<TensorType> result_types) {
  if (result_names.size() != result_types.size())
    return Status::internal("addNodeWithTypes: result names and types differ in count");
  for (const auto& n : result_names)
    if (findValue(n) != kNoValue) return Status::badInput(loc.str() + ": value '%" + n + "' is defined twice");
  int32_t node_index = static_cast<int32_t>(nodes.size());
  Node node{op, std::move(operands), {}, std::move(attrs), std::move(loc)};
  for (size_t i = 0; i < result_types.size(); ++i) {
    ValueId id = newValue(result_names[i], std::move(result_types[i]));
    values[id].producer = node_index;
    values[id].result_index = static_cast<int32_t>(i);
    node.results.push_back(id);
  }
  std::vector<ValueId> results = node.results;
  nodes.push_back(std::move(node));
  return results;
}

Status Graph::renameValue(ValueId v, const std::string& new_name) {
  ValueId holder = findValue(new_name);
  if (holder == v) return Status::ok();
  if (holder != kNoValue) return Status::badInput("value '%" + new_name + "' is defined twice");
  by_name_.erase(values[v].name);
  values[v].name = new_name;
  by_name_.emplace(new_name, v);
  return Status::ok();
}

ValueId Graph::findValue(std::string_view value_name) const {
  auto it = by_name_.find(std::string(value_name));
  return it == by_name_.end() ? kNoValue : it->second;
}

std::string Graph::uniqueName(std::string_view hint) {
  std::string base(hint.empty() ? "t" : hint);
  if (findValue(base) == kNoValue) return base;
  int64_t& next = next_suffix_[base];
  for (;;) {
    std::string candidate = base + "_" + std::to_string(++next);
    if (findValue(candidate) == kNoValue) return candidate;
  }
}

const Param* Graph::findParam(ValueId v) const {
  if (param_position_.size() == params.size()) {
    auto it = param_position_.find(v);
    if (it == param_position_.end()) return nullptr;
    if (it->second < params.size() && params[it->second].value == v) return &params[it->second];
  }
  // The index no longer matches `params` (a pass edited the vector itself): scan.
  for (const auto& p : params)
    if (p.value == v) return &p;
  return nullptr;
}

void Graph::rebuildParamIndex() {
  param_position_.clear();
  for (size_t i = 0; i < params.size(); ++i) param_position_.emplace(params[i].value, i);
}

bool Graph::isInput(ValueId v) const { return std::find(inputs.begin(), inputs.end(), v) != inputs.end(); }

void Graph::eraseNodes(const std::vector<bool>& dead) {
  std::vector<Node> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (i >= dead.size() || !dead[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  compact();
}

void Graph::eraseNodes(const std::vector<bool>& dead, std::vector<int64_t>* node_labels) {
  if (node_labels && !node_labels->empty()) {
    std::vector<int64_t> kept;
    for (size_t i = 0; i < node_labels->size(); ++i)
      if (i >= dead.size() || !dead[i]) kept.push_back((*node_labels)[i]);
    *node_labels = std::move(kept);
  }
  eraseNodes(dead);
}

void Graph::compact() {
  // 1. Mark values that are still defined: inputs, params, node results.
  std::vector<bool> live(values.size(), false);
  for (ValueId v : inputs) live[v] = true;
  for (const auto& p : params) live[p.value] = true;
  for (const auto& n : nodes)
    for (ValueId v : n.results) live[v] = true;
  // 2. Renumber the live ones in order and rewrite every reference.
  std::vector<ValueId> remap(values.size(), kNoValue);
  std::vector<Value> kept;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!live[i]) continue;
    remap[i] = static_cast<ValueId>(kept.size());
    kept.push_back(std::move(values[i]));
  }
  values = std::move(kept);
  auto fix = [&](ValueId& v) { v = v == kNoValue ? kNoValue : remap[v]; };
  for (auto& v : inputs) fix(v);
  for (auto& p : params) fix(p.value);
  for (auto& v : outputs) fix(v);
  for (auto& u : updates) {
    fix(u.target);
    fix(u.new_value);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (auto& v : nodes[i].operands) fix(v);
    for (size_t r = 0; r < nodes[i].results.size(); ++r) {
      fix(nodes[i].results[r]);
      values[nodes[i].results[r]].producer = static_cast<int32_t>(i);
      values[nodes[i].results[r]].result_index = static_cast<int32_t>(r);
    }
  }
  remapNameIndex(remap);
  rebuildParamIndex();
}

void Graph::remapNameIndex(const std::vector<ValueId>& remap) {
  // Walks the index in place (no name is hashed or copied again): dropped values leave it, the
  // others take their new ids.
  for (auto it = by_name_.begin(); it != by_name_.end();) {
    const ValueId old_id = it->second;
    const ValueId new_id = old_id >= 0 && static_cast<size_t>(old_id) < remap.size() ? remap[old_id] : kNoValue;
    if (new_id == kNoValue) {
      it = by_name_.erase(it);
    } else {
      it->second = new_id;
      ++it;
    }
  }
}

std::vector<std::vector<int32_t>> Graph::computeUsers() const {
  std::vector<std::vector<int32_t>> users(values.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId v : nodes[i].operands)
      if (v >= 0) users[v].push_back(static_cast<int32_t>(i));
  return users;
}

std::vector<bool> Graph::valuesReadAfterNodes() const {
  std::vector<bool> read(values.size(), false);
  for (ValueId v : outputs) read[v] = true;
  for (const StateUpdate& update : updates) read[update.new_value] = true;
  return read;
}

bool Graph::trains() const {
  for (const Node& node : nodes)
    if (opDef(node.op).family == OpFamily::kGradient || opDef(node.op).family == OpFamily::kOptimizer) return true;
  return false;
}

int64_t Graph::parameterCount() const {
  int64_t n = 0;
  for (const auto& p : params) n += values[p.value].type.numel();
  return n;
}

std::string nodeContext(const Graph& graph, const Node& node) {
  std::string s = node.loc.known() ? node.loc.str() + ": " : "";
  s += std::string(opName(node.op));
  if (!node.results.empty()) s += " '%" + graph.values[node.results[0]].name + "'";
  return s + ": ";
}

}  // namespace cleave
