// Pipeline stages: the stage-balancing dynamic programme and the extraction of one stage's graph.
#include "passes/partition/pipeline_stages.h"

#include "analysis/cost_model.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

namespace cleave {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Per value: true when it depends on a graph input (inputs included).
std::vector<bool> dataDependentValues(const Graph& graph) {
  std::vector<bool> data(graph.values.size(), false);
  for (ValueId v : graph.inputs) data[v] = true;
  for (const Node& node : graph.nodes) {
    bool depends = false;
    for (ValueId v : node.operands) depends = depends || data[v];
    for (ValueId r : node.results) data[r] = depends;
  }
  return data;
}

// Per node: true when one of its operands depends on a graph input.
std::vector<bool> dataDependentNodes(const Graph& graph, const std::vector<bool>& data_values) {
  std::vector<bool> data(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (ValueId v : graph.nodes[i].operands) data[i] = data[i] || data_values[v];
  return data;
}

std::string stageName(int stage) { return "stage " + std::to_string(stage); }

// ---- Stage assignment ----

// A run of nodes that moves between stages as one: a node with work and the nodes without work
// just before it (the last unit also takes the nodes without work at the end).
struct WorkUnit {
  std::vector<int32_t> nodes;
  double cost = 0;
  int64_t param_bytes = 0;
  int64_t activation_bytes = 0;
};

Status checkCostModel(const Graph& graph, int num_stages, const StageCostModel& model) {
  const size_t n = graph.nodes.size();
  auto sized = [&](size_t size, bool may_be_empty) { return size == n || (may_be_empty && size == 0); };
  if (num_stages < 1) return Status::usage("pipeline stages: the number of stages must be at least 1, got " +
                                           std::to_string(num_stages));
  if (model.num_microbatches < 1)
    return Status::usage("pipeline stages: the number of microbatches must be at least 1, got " +
                         std::to_string(model.num_microbatches));
  if (!sized(model.node_costs.size(), false) || !sized(model.node_param_bytes.size(), true) ||
      !sized(model.node_activation_bytes.size(), true))
    return Status::internal("pipeline stages: the cost model has " + std::to_string(model.node_costs.size()) +
                            " costs, " + std::to_string(model.node_param_bytes.size()) + " parameter sizes and " +
                            std::to_string(model.node_activation_bytes.size()) + " activation sizes for " +
                            std::to_string(n) + " nodes");
  for (double cost : model.node_costs)
    if (!(cost >= 0) || cost == kInfinity)
      return Status::internal("pipeline stages: a node cost is negative or not finite");
  return Status::ok();
}

// The work units of the input-dependent nodes, in program order. Parameter bytes of nodes that do
// not depend on an input (e.g. a transposed weight) count at the first input-dependent node using them.
std::vector<WorkUnit> workUnits(const Graph& graph, const StageCostModel& model, const std::vector<bool>& data_nodes) {
  auto at = [](const std::vector<int64_t>& bytes, size_t i) { return bytes.empty() ? 0 : bytes[i]; };
  std::vector<bool> claimed(graph.nodes.size(), false);
  // The parameter bytes of constant-like node `i` and its constant-like producers not yet counted.
  auto claim = [&](auto&& self, int32_t i) -> int64_t {
    if (i < 0 || data_nodes[i] || claimed[i]) return 0;
    claimed[i] = true;
    int64_t bytes = at(model.node_param_bytes, i);
    for (ValueId v : graph.nodes[i].operands) bytes += self(self, graph.values[v].producer);
    return bytes;
  };
  std::vector<WorkUnit> units;
  WorkUnit pending;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!data_nodes[i]) continue;
    pending.nodes.push_back(static_cast<int32_t>(i));
    pending.cost += model.node_costs[i];
    pending.param_bytes += at(model.node_param_bytes, i);
    pending.activation_bytes += at(model.node_activation_bytes, i);
    for (ValueId v : graph.nodes[i].operands) pending.param_bytes += claim(claim, graph.values[v].producer);
    if (model.node_costs[i] > 0) units.push_back(std::exchange(pending, WorkUnit{}));
  }
  if (!units.empty() && !pending.nodes.empty()) {
    WorkUnit& last = units.back();
    last.nodes.insert(last.nodes.end(), pending.nodes.begin(), pending.nodes.end());
    last.param_bytes += pending.param_bytes;
    last.activation_bytes += pending.activation_bytes;
  }
  return units;
}

// Prefix sums over work units, and the memory of a stage holding a run of them.
class UnitSums {
 public:
  UnitSums(const std::vector<WorkUnit>& units, const StageCostModel& model, int num_stages)
      : model_(model), num_stages_(num_stages) {
    cost_.push_back(0);
    params_.push_back(0);
    activations_.push_back(0);
    for (const WorkUnit& unit : units) {
      cost_.push_back(cost_.back() + unit.cost);
      params_.push_back(params_.back() + unit.param_bytes);
      activations_.push_back(activations_.back() + unit.activation_bytes);
    }
  }
  // Cost of units [begin, end).
  double cost(size_t begin, size_t end) const { return cost_[end] - cost_[begin]; }
  // Memory of stage `stage` holding units [begin, end).
  int64_t memory(int stage, size_t begin, size_t end) const {
    const int in_flight = microbatchesInFlight(model_.schedule, stage, num_stages_, model_.num_microbatches);
    return static_cast<int64_t>(model_.param_memory_factor * static_cast<double>(params_[end] - params_[begin])) +
           in_flight * (activations_[end] - activations_[begin]);
  }
  bool fits(int stage, size_t begin, size_t end) const {
    return model_.memory_limit_bytes <= 0 || memory(stage, begin, end) <= model_.memory_limit_bytes;
  }

 private:
  const StageCostModel& model_;
  int num_stages_;
  std::vector<double> cost_;
  std::vector<int64_t> params_, activations_;
};

// Splits `num_units` units into `num_stages` non-empty contiguous runs minimising the largest
// stage_score(stage, begin, end) over the stages whose runs are feasible(stage, begin, end); returns
// the first unit of each stage plus num_units at the end, or an empty vector when nothing is feasible.
template <class Score, class Feasible>
std::vector<size_t> minimaxSplit(size_t num_units, int num_stages, Score stage_score, Feasible feasible) {
  // best[k][j]: the smallest largest score of units [0, j) on stages 0..k-1; from[k][j]: where stage k-1 starts.
  std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(num_units + 1, kInfinity));
  std::vector<std::vector<size_t>> from(num_stages + 1, std::vector<size_t>(num_units + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= num_stages; ++k)
    for (size_t j = k; j <= num_units; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInfinity || !feasible(k - 1, i, j)) continue;
        double score = std::max(best[k - 1][i], stage_score(k - 1, i, j));
        if (score < best[k][j]) best[k][j] = score, from[k][j] = i;
      }
  if (best[num_stages][num_units] == kInfinity) return {};
  std::vector<size_t> starts(num_stages + 1, num_units);
  for (int k = num_stages; k > 0; --k) starts[k - 1] = from[k][starts[k]];
  return starts;
}

// The error for a memory limit no split meets, with the least memory a split needs.
Status memoryLimitError(const Graph& graph, int num_stages, const StageCostModel& model, const UnitSums& sums,
                        size_t num_units) {
  auto memory = [&](int stage, size_t begin, size_t end) { return static_cast<double>(sums.memory(stage, begin, end)); };
  std::vector<size_t> starts = minimaxSplit(num_units, num_stages, memory, [](int, size_t, size_t) { return true; });
  int64_t least = 0;
  for (int s = 0; s < num_stages; ++s) least = std::max(least, sums.memory(s, starts[s], starts[s + 1]));
  return Status::badInput("pipeline stages: no split of graph '" + graph.name + "' into " +
                          std::to_string(num_stages) + " stages fits the memory limit of " +
                          std::to_string(model.memory_limit_bytes) + " bytes per device; the split using the "
                          "least memory needs " + std::to_string(least) + " bytes on its fullest stage");
}

// ---- Stage extraction ----

// Which nodes each stage's graph holds and which values cross between stages.
struct StageLayout {
  int num_stages = 1;
  std::vector<bool> data_values;            // per value: depends on a graph input
  std::vector<bool> data_nodes;             // per node: depends on a graph input
  std::vector<std::vector<bool>> included;  // per stage, per node: the stage's graph holds it
  std::vector<StageTransfer> transfers;
  std::vector<SharedParameter> shared;
};

// Per value: it is float and depends on a trainable parameter through float values, and graph
// output 0 depends on it (autodiff's condition for a gradient to flow, over the whole graph).
std::vector<bool> valuesCarryingGradients(const Graph& graph) {
  std::vector<bool> from_param(graph.values.size(), false), feeds_loss(graph.values.size(), false);
  for (const Param& p : graph.params)
    if (p.trainable && isFloat(graph.values[p.value].type.dtype)) from_param[p.value] = true;
  for (const Node& node : graph.nodes) {
    bool depends = false;
    for (ValueId v : node.operands) depends = depends || from_param[v];
    for (ValueId r : node.results) from_param[r] = depends && isFloat(graph.values[r].type.dtype);
  }
  if (!graph.outputs.empty()) feeds_loss[graph.outputs[0]] = true;
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    bool feeds = false;
    for (ValueId r : graph.nodes[i].results) feeds = feeds || feeds_loss[r];
    if (feeds)
      for (ValueId v : graph.nodes[i].operands) feeds_loss[v] = true;
  }
  std::vector<bool> carries(graph.values.size(), false);
  for (size_t v = 0; v < carries.size(); ++v) carries[v] = from_param[v] && feeds_loss[v];
  return carries;
}

Expected<StageLayout> layStages(const Graph& graph, const StageAssignment& assignment) {
  StageLayout layout;
  const int num_stages = layout.num_stages = assignment.num_stages;
  const int last = num_stages - 1;
  const size_t n = graph.nodes.size();
  if (num_stages < 1 || assignment.node_stage.size() != n)
    return Status::internal("pipeline stages: the assignment has " + std::to_string(assignment.node_stage.size()) +
                            " node stages for " + std::to_string(n) + " nodes and " + std::to_string(num_stages) +
                            " stages");
  layout.data_values = dataDependentValues(graph);
  layout.data_nodes = dataDependentNodes(graph, layout.data_values);
  const std::vector<int>& stage_of = assignment.node_stage;
  // 1. Input-dependent nodes run on their stage, after the producers of their operands.
  for (size_t i = 0; i < n; ++i) {
    if (!layout.data_nodes[i]) continue;
    if (stage_of[i] < 0 || stage_of[i] >= num_stages)
      return Status::internal(nodeContext(graph, graph.nodes[i]) + "assigned to stage " +
                              std::to_string(stage_of[i]) + " of " + std::to_string(num_stages));
    for (ValueId v : graph.nodes[i].operands) {
      int32_t producer = graph.values[v].producer;
      if (producer >= 0 && layout.data_nodes[producer] && stage_of[producer] > stage_of[i])
        return Status::badInput(nodeContext(graph, graph.nodes[i]) + "on " + stageName(stage_of[i]) + " uses '%" +
                                graph.values[v].name + "', which " + stageName(stage_of[producer]) +
                                " computes later in the pipeline");
    }
  }
  if (!graph.outputs.empty()) {
    int32_t loss_producer = graph.values[graph.outputs[0]].producer;
    if (loss_producer >= 0 && layout.data_nodes[loss_producer] && stage_of[loss_producer] != last)
      return Status::badInput(nodeContext(graph, graph.nodes[loss_producer]) + "output 0 (the loss) is computed on " +
                              stageName(stage_of[loss_producer]) + ", not on the last stage (" + stageName(last) + ")");
  }
  // 2. Each stage holds its input-dependent nodes and every other node they (or its outputs) need.
  layout.included.assign(num_stages, std::vector<bool>(n, false));
  for (int s = 0; s < num_stages; ++s) {
    std::vector<bool> needed(graph.values.size(), false);
    if (s == last)
      for (ValueId v : graph.outputs) needed[v] = true;
    for (size_t i = n; i-- > 0;) {
      bool include = layout.data_nodes[i] ? stage_of[i] == s : false;
      for (ValueId r : graph.nodes[i].results) include = include || (!layout.data_nodes[i] && needed[r]);
      if (!include) continue;
      layout.included[s][i] = true;
      for (ValueId v : graph.nodes[i].operands) needed[v] = true;
    }
  }
  // 3. A trainable parameter several stages use is shared by them (its gradients summed).
  std::vector<std::set<int>> stages_using(graph.values.size());
  for (int s = 0; s < num_stages; ++s)
    for (size_t i = 0; i < n; ++i)
      if (layout.included[s][i])
        for (ValueId v : graph.nodes[i].operands) stages_using[v].insert(s);
  for (const Param& param : graph.params) {
    const std::set<int>& stages = stages_using[param.value];
    if (!param.trainable || stages.size() < 2) continue;
    for (const StateUpdate& update : graph.updates)
      if (update.target == param.value)
        return Status::badInput("pipeline stages: '%" + graph.values[param.value].name + "' is used on " +
                                stageName(*stages.begin()) + " and " + stageName(*stages.rbegin()) +
                                " and has a state update, which stages cannot share");
    layout.shared.push_back({graph.values[param.value].name, std::vector<int64_t>(stages.begin(), stages.end())});
  }
  // 4. Transfers: each input-dependent result to each later stage using it (outputs: the last stage).
  const std::vector<bool> carries = valuesCarryingGradients(graph);
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<bool> is_output(graph.values.size(), false);
  for (ValueId v : graph.outputs) is_output[v] = true;
  for (size_t p = 0; p < n; ++p) {
    if (!layout.data_nodes[p]) continue;
    for (ValueId v : graph.nodes[p].results) {
      std::set<int> destinations;
      for (int32_t user : users[v])
        if (stage_of[user] != stage_of[p]) destinations.insert(stage_of[user]);
      if (is_output[v] && stage_of[p] != last) destinations.insert(last);
      for (int to : destinations)
        layout.transfers.push_back(StageTransfer{graph.values[v].name, stage_of[p], to,
                                                 static_cast<int64_t>(layout.transfers.size()), carries[v]});
    }
  }
  return layout;
}

// Builds stage `stage`'s graph from `layout`.
class StageBuilder {
 public:
  StageBuilder(const Graph& source, const StageLayout& layout, int stage)
      : source_(source), layout_(layout), stage_(stage), mapped_(source.values.size(), kNoValue) {}

  Expected<PipelineStage> run() {
    PipelineStage result;
    result.boundary.stage = stage_;
    result.boundary.num_stages = layout_.num_stages;
    for (const StageTransfer& transfer : layout_.transfers) {
      if (transfer.from_stage == stage_) result.boundary.sends.push_back(transfer);
      if (transfer.to_stage == stage_) result.boundary.recvs.push_back(transfer);
    }
    for (const SharedParameter& shared : layout_.shared)
      if (std::find(shared.stages.begin(), shared.stages.end(), stage_) != shared.stages.end())
        result.boundary.shared.push_back(shared);
    Graph& graph = result.graph;
    graph.name = source_.name;
    const bool last = stage_ == layout_.num_stages - 1;
    // 1. The inputs and parameters this stage's nodes (and outputs) use, in the source's order.
    std::vector<bool> used(source_.values.size(), false);
    for (size_t i = 0; i < source_.nodes.size(); ++i)
      if (layout_.included[stage_][i])
        for (ValueId v : source_.nodes[i].operands) used[v] = true;
    if (last)
      for (ValueId v : source_.outputs) used[v] = true;
    // A forward state update (BatchNormalization's running statistics) lives on the stage that
    // computes its new value, with its target parameter.
    std::vector<StateUpdate> updates;
    for (const StateUpdate& update : source_.updates) {
      const int32_t producer = source_.values[update.new_value].producer;
      if (producer < 0 || !layout_.included[stage_][static_cast<size_t>(producer)]) continue;
      used[update.target] = true;
      updates.push_back(update);
    }
    for (ValueId input : source_.inputs)
      if (used[input]) {
        CLEAVE_ASSIGN_OR_RETURN(mapped_[input], graph.addInput(source_.values[input].name, source_.values[input].type));
      }
    for (const Param& param : source_.params)
      if (used[param.value]) {
        const Value& value = source_.values[param.value];
        CLEAVE_ASSIGN_OR_RETURN(mapped_[param.value], graph.addParam(value.name, value.type, param.init, param.trainable));
        graph.params.back().full_shape = param.full_shape;
        graph.params.back().shard_offset = param.shard_offset;
        graph.params.back().shard_steps = param.shard_steps;
        graph.params.back().model = param.model;
      }
    // 2. Nodes in program order: this stage's nodes followed by their sends, and a receive where an
    //    earlier stage produced a value this stage uses.
    for (size_t i = 0; i < source_.nodes.size(); ++i) {
      const Node& node = source_.nodes[i];
      if (layout_.included[stage_][i]) {
        CLEAVE_TRY(copyNode(graph, node));
        for (const StageTransfer& transfer : result.boundary.sends)
          if (producedBy(transfer, node)) CLEAVE_TRY(addSend(graph, node, transfer));
      } else {
        for (const StageTransfer& transfer : result.boundary.recvs)
          if (producedBy(transfer, node)) CLEAVE_TRY(addRecv(graph, node, transfer));
      }
    }
    // 3. The outputs, on the last stage; the state updates of this stage.
    if (last)
      for (ValueId v : source_.outputs) graph.outputs.push_back(mapped_[v]);
    for (const StateUpdate& update : updates) graph.updates.push_back({mapped_[update.target], mapped_[update.new_value]});
    return result;
  }

 private:
  bool producedBy(const StageTransfer& transfer, const Node& node) const {
    for (ValueId r : node.results)
      if (source_.values[r].name == transfer.value_name) return true;
    return false;
  }

  Status copyNode(Graph& graph, const Node& node) {
    std::vector<ValueId> operands;
    for (ValueId v : node.operands) {
      if (mapped_[v] == kNoValue)
        return Status::internal(nodeContext(source_, node) + "its operand '%" + source_.values[v].name +
                                "' is missing from " + stageName(stage_));
      operands.push_back(mapped_[v]);
    }
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (ValueId r : node.results) {
      names.push_back(source_.values[r].name);
      types.push_back(source_.values[r].type);
    }
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph.addNodeWithTypes(node.op, std::move(operands), node.attrs, node.loc, std::move(names),
                                                   std::move(types)));
    for (size_t k = 0; k < results.size(); ++k) mapped_[node.results[k]] = results[k];
    return Status::ok();
  }

  Status addSend(Graph& graph, const Node& producer, const StageTransfer& transfer) {
    AttrMap attrs = {{"peer_stage", int64_t{transfer.to_stage}}, {"tag", transfer.tag}};
    ValueId value = mapped_[source_.findValue(transfer.value_name)];
    return graph.addNodeWithTypes(OpId::send, {value}, std::move(attrs), producer.loc, {}, {}).status();
  }

  Status addRecv(Graph& graph, const Node& producer, const StageTransfer& transfer) {
    ValueId source_value = source_.findValue(transfer.value_name);
    const TensorType& type = source_.values[source_value].type;
    AttrMap attrs = {{"peer_stage", int64_t{transfer.from_stage}},
                     {"tag", transfer.tag},
                     {"shape", type.shape},
                     {"dtype", std::string(dtypeName(type.dtype))}};
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph.addNodeWithTypes(OpId::recv, {}, std::move(attrs), producer.loc,
                                                   {transfer.value_name}, {type}));
    mapped_[source_value] = results[0];
    return Status::ok();
  }

  const Graph& source_;
  const StageLayout& layout_;
  const int stage_;
  std::vector<ValueId> mapped_;  // per source value: its value in the stage graph
};

// Stages of input-dependent nodes by unit (stage s holds units [starts[s], starts[s + 1])), then of
// the others: the first stage of their users.
StageAssignment assignmentAt(const Graph& graph, int num_stages, const std::vector<WorkUnit>& units,
                             const UnitSums& sums, const std::vector<size_t>& starts, const std::vector<bool>& data_nodes) {
  StageAssignment assignment;
  assignment.num_stages = num_stages;
  assignment.node_stage.assign(graph.nodes.size(), num_stages - 1);
  for (int s = 0; s < num_stages; ++s) {
    assignment.stage_cost.push_back(sums.cost(starts[s], starts[s + 1]));
    assignment.stage_memory_bytes.push_back(sums.memory(s, starts[s], starts[s + 1]));
    for (size_t u = starts[s]; u < starts[s + 1]; ++u)
      for (int32_t node : units[u].nodes) assignment.node_stage[node] = s;
  }
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    if (data_nodes[i]) continue;
    for (ValueId r : graph.nodes[i].results)
      for (int32_t user : users[r]) assignment.node_stage[i] = std::min(assignment.node_stage[i], assignment.node_stage[user]);
  }
  return assignment;
}

// The input-dependent nodes in program order, grouped into units that start at a node with work.
struct DataUnits {
  std::vector<bool> data_nodes;
  std::vector<WorkUnit> units;
};
DataUnits dataUnits(const Graph& graph, const StageCostModel& model) {
  DataUnits result;
  result.data_nodes = dataDependentNodes(graph, dataDependentValues(graph));
  result.units = workUnits(graph, model, result.data_nodes);
  return result;
}

// The unit of each node, -1 for nodes in none (those depending on no input).
std::vector<int64_t> unitOfEachNode(const Graph& graph, const std::vector<WorkUnit>& units) {
  std::vector<int64_t> unit_of(graph.nodes.size(), -1);
  for (size_t u = 0; u < units.size(); ++u)
    for (int32_t node : units[u].nodes) unit_of[node] = static_cast<int64_t>(u);
  return unit_of;
}

// For each unit index i, the last unit that reads a value computed in a unit before i (-1: none):
// a stage [i, end) is skipped by some value exactly when end <= this.
std::vector<int64_t> lastReaderOfEarlierValues(const Graph& graph, const std::vector<WorkUnit>& units) {
  const std::vector<int64_t> unit_of = unitOfEachNode(graph, units);
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::vector<int64_t> last(units.size() + 1, -1);
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t latest = last[u];
    for (int32_t node : units[u].nodes)
      for (ValueId r : graph.nodes[node].results)
        for (int32_t reader : users[r]) latest = std::max(latest, unit_of[reader]);
    last[u + 1] = latest;
  }
  return last;
}

}  // namespace

std::vector<int64_t> parameterBytesByFirstUser(const Graph& graph) {
  std::vector<int64_t> bytes(graph.nodes.size(), 0);
  std::vector<bool> counted(graph.values.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (ValueId v : graph.nodes[i].operands)
      if (!counted[v] && graph.findParam(v)) {
        counted[v] = true;
        bytes[i] += graph.values[v].type.bytes();
      }
  return bytes;
}

std::vector<int64_t> nodeResultBytes(const Graph& graph) {
  std::vector<int64_t> bytes(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (ValueId r : graph.nodes[i].results) bytes[i] += graph.values[r].type.bytes();
  return bytes;
}

Expected<StageAssignment> assignStages(const Graph& graph, int num_stages, const StageCostModel& model) {
  CLEAVE_TRY(checkCostModel(graph, num_stages, model));
  // 1. The input-dependent nodes in program order, grouped into units that start at a node with work.
  const auto [data_nodes, units] = dataUnits(graph, model);
  if (units.size() < static_cast<size_t>(num_stages))
    return Status::badInput("pipeline stages: cannot split graph '" + graph.name + "' into " +
                            std::to_string(num_stages) + " stages: only " + std::to_string(units.size()) +
                            " of its nodes that depend on an input have work (a cost above 0)");
  // 2. The split minimising the slowest stage among those within the memory limit (for virtual
  //    stages, first among those where no value skips a stage).
  const UnitSums sums(units, model, num_stages);
  const auto cost = [&](int, size_t begin, size_t end) { return sums.cost(begin, end); };
  const auto fits = [&](int stage, size_t begin, size_t end) { return sums.fits(stage, begin, end); };
  std::vector<size_t> starts;
  if (model.avoid_skipped_stages) {
    const std::vector<int64_t> last_reader = lastReaderOfEarlierValues(graph, units);
    starts = minimaxSplit(units.size(), num_stages, cost, [&](int stage, size_t begin, size_t end) {
      return fits(stage, begin, end) && last_reader[begin] < static_cast<int64_t>(end);
    });
  }
  if (starts.empty()) starts = minimaxSplit(units.size(), num_stages, cost, fits);
  if (starts.empty()) return memoryLimitError(graph, num_stages, model, sums, units.size());
  return assignmentAt(graph, num_stages, units, sums, starts, data_nodes);
}

Expected<StageAssignment> assignStagesAt(const Graph& graph, int num_stages, const std::vector<std::string>& first_nodes,
                                         const StageCostModel& model) {
  CLEAVE_TRY(checkCostModel(graph, num_stages, model));
  if (first_nodes.size() + 1 != static_cast<size_t>(num_stages))
    return Status::internal("pipeline stages: " + std::to_string(first_nodes.size()) + " stage starts for " +
                            std::to_string(num_stages) + " stages");
  const auto [data_nodes, units] = dataUnits(graph, model);
  const std::vector<int64_t> unit_of = unitOfEachNode(graph, units);
  std::vector<size_t> starts = {0};
  for (const std::string& name : first_nodes) {
    const ValueId v = graph.findValue(name);
    const int32_t node = v == kNoValue ? -1 : graph.values[v].producer;
    if (node < 0 || unit_of[node] < 0)
      return Status::badInput("pipeline stages: no node of work '%" + name + "' to start a stage at");
    const size_t unit = static_cast<size_t>(unit_of[node]);
    if (unit <= starts.back())
      return Status::badInput("pipeline stages: the stage starting at '%" + name + "' starts before the one before it ends");
    starts.push_back(unit);
  }
  starts.push_back(units.size());
  const UnitSums sums(units, model, num_stages);
  return assignmentAt(graph, num_stages, units, sums, starts, data_nodes);
}

Expected<std::vector<StageTransfer>> stageTransfers(const Graph& graph, const StageAssignment& assignment) {
  CLEAVE_ASSIGN_OR_RETURN(StageLayout layout, layStages(graph, assignment));
  return std::move(layout.transfers);
}

Expected<PipelineStage> extractStage(const Graph& graph, const StageAssignment& assignment, int stage) {
  if (stage < 0 || stage >= assignment.num_stages)
    return Status::internal("pipeline stages: stage " + std::to_string(stage) + " is not one of the " +
                            std::to_string(assignment.num_stages) + " stages");
  CLEAVE_ASSIGN_OR_RETURN(StageLayout layout, layStages(graph, assignment));
  return StageBuilder(graph, layout, stage).run();
}

StageCostModel stageCostModel(const Graph& forward, const CostModel& costs) {
  StageCostModel model;
  for (int32_t n = 0; n < static_cast<int32_t>(forward.nodes.size()); ++n)
    model.node_costs.push_back(3 * costs.nodeTime(forward, n));
  model.node_param_bytes = parameterBytesByFirstUser(forward);
  model.node_activation_bytes = nodeResultBytes(forward);
  return model;
}

}  // namespace cleave
