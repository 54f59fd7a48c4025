// Verifier: checks that a graph is well formed; errors name the node and its source location.
#include "ir/verifier.h"

#include <unordered_set>

namespace cleave {
namespace {

Status checkInitializer(const Graph& graph, const Param& param) {
  const Value& v = graph.values[param.value];
  const Initializer& init = param.init;
  if (!isInitializerKind(init.kind))
    return Status::badInput("parameter '%" + v.name + "': unknown initializer '" + init.kind + "'");
  if (init.kind == "data") {
    if (!init.data) return Status::badInput("parameter '%" + v.name + "': data initializer without data");
    if (init.data->type != v.type)
      return Status::badInput("parameter '%" + v.name + "' is " + v.type.str() + " but its data is " +
                              init.data->type.str());
    if (static_cast<int64_t>(init.data->bytes.size()) != v.type.bytes())
      return Status::badInput("parameter '%" + v.name + "': data holds " + std::to_string(init.data->bytes.size()) +
                              " bytes, the type needs " + std::to_string(v.type.bytes()));
  }
  return Status::ok();
}

}  // namespace

Status verifyGraph(const Graph& graph) {
  const auto n_values = static_cast<ValueId>(graph.values.size());
  std::vector<bool> defined(graph.values.size(), false);
  std::unordered_set<std::string> names;
  for (const auto& v : graph.values)
    if (!names.insert(v.name).second) return Status::badInput("value '%" + v.name + "' is defined twice");
  for (ValueId v : graph.inputs) {
    if (v < 0 || v >= n_values) return Status::internal("graph input is not a value");
    defined[v] = true;
  }
  for (const auto& p : graph.params) {
    if (p.value < 0 || p.value >= n_values) return Status::internal("parameter is not a value");
    if (defined[p.value]) return Status::badInput("value '%" + graph.values[p.value].name + "' is defined twice");
    defined[p.value] = true;
    CLEAVE_TRY(checkInitializer(graph, p));
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    std::string where = nodeContext(graph, node);
    std::vector<TensorType> operand_types;
    for (size_t k = 0; k < node.operands.size(); ++k) {
      ValueId v = node.operands[k];
      if (v < 0 || v >= n_values) return Status::badInput(where + "operand " + std::to_string(k) + " is not a value");
      if (!defined[v])
        return Status::badInput(where + "operand " + std::to_string(k) + " '%" + graph.values[v].name +
                                "' is used before it is defined");
      operand_types.push_back(graph.values[v].type);
    }
    auto inferred = inferResultTypes(opDef(node.op), operand_types, node.attrs);
    if (!inferred) return inferred.status().withContext(where);
    if (inferred->size() != node.results.size())
      return Status::badInput(where + "has " + std::to_string(node.results.size()) + " result(s), the op gives " +
                              std::to_string(inferred->size()));
    for (size_t r = 0; r < node.results.size(); ++r) {
      ValueId v = node.results[r];
      if (v < 0 || v >= n_values) return Status::internal(where + "result is not a value");
      if (defined[v]) return Status::badInput(where + "value '%" + graph.values[v].name + "' is defined twice");
      defined[v] = true;
      if (graph.values[v].producer != static_cast<int32_t>(i))
        return Status::internal(where + "result's producer index is stale");
      if (graph.values[v].type != (*inferred)[r])
        return Status::badInput(where + "result '%" + graph.values[v].name + "' is declared " +
                                graph.values[v].type.str() + " but the op gives " + (*inferred)[r].str());
    }
  }
  // A graph must produce something: outputs, state updates, or effects (a pipeline stage that only sends).
  bool has_effects = false;
  for (const Node& node : graph.nodes) has_effects = has_effects || opDef(node.op).side_effects;
  if (graph.outputs.empty() && graph.updates.empty() && !has_effects)
    return Status::badInput("graph @" + graph.name + " has no outputs");
  for (ValueId v : graph.outputs) {
    if (v < 0 || v >= n_values) return Status::internal("graph output is not a value");
    if (!defined[v]) return Status::badInput("output '%" + graph.values[v].name + "' is never defined");
  }
  std::vector<bool> updated(graph.values.size(), false);
  for (const auto& u : graph.updates) {
    if (u.target < 0 || u.target >= n_values || u.new_value < 0 || u.new_value >= n_values)
      return Status::internal("state update refers to a value not in the graph");
    const Value& target = graph.values[u.target];
    const Value& next = graph.values[u.new_value];
    if (!graph.findParam(u.target))
      return Status::badInput("update of '%" + target.name + "': only parameters can be updated");
    if (updated[u.target]) return Status::badInput("parameter '%" + target.name + "' is updated twice");
    updated[u.target] = true;
    if (!defined[u.new_value]) return Status::badInput("update of '%" + target.name + "': '%" + next.name + "' is never defined");
    if (target.type != next.type)
      return Status::badInput("update of '%" + target.name + "' (" + target.type.str() + ") with '%" + next.name +
                              "' of another type (" + next.type.str() + ")");
  }
  return Status::ok();
}

}  // namespace cleave
