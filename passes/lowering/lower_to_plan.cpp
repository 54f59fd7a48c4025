// Lowering to a plan: buffers, instructions, views, in-place state updates and copies for one device.
#include "passes/lowering/lower_to_plan.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <utility>

#include "ir/parallel_tasks.h"
#include "ir/plan.h"
#include "ir/plan_storage.h"
#include "ir/verifier.h"
#include "passes/lowering/memory_planner.h"

namespace cleave {
namespace {

// Name parts by which the optimizer pass marks its state parameters, and its step counter's name.
constexpr std::array<std::string_view, 3> kOptimizerStateMarkers = {".momentum", ".exp_avg", ".exp_avg_sq"};
constexpr std::string_view kStepCounterName = "step";
// Suffix autodiff gives a parameter's gradient.
constexpr std::string_view kGradientSuffix = ".grad";

constexpr int32_t kNoBuffer = -1;

planpb::Initializer initializerProto(const Initializer& init) {
  planpb::Initializer out;
  out.set_kind(init.kind);
  for (const auto& [arg_name, arg] : init.args) toProto(arg, &(*out.mutable_args())[arg_name]);
  if (init.kind == "data" && init.data) out.set_data(init.data->bytes.data(), init.data->bytes.size());
  return out;
}

// Lowers one graph into one program of a rank. Parameters are shared with the rank's other
// programs through `param_buffers` (name -> buffer id).
class ProgramLowering {
 public:
  ProgramLowering(const ProgramGraph& program, planpb::RankPlan& rank, std::map<std::string, int32_t>& param_buffers,
                  const DeviceMesh& mesh, MeshCoord coord)
      : graph_(*program.graph),
        mesh_(mesh),
        coord_(coord),
        rank_(rank),
        param_buffers_(param_buffers),
        program_(rank.add_programs()),
        where_("program '" + program.name + "': "),
        buffer_of_(graph_.values.size(), kNoBuffer),
        instruction_of_node_(graph_.nodes.size(), -1),
        node_microbatch_(program.node_microbatch),
        node_backward_(program.node_backward),
        output_or_update_(graph_.values.size(), false) {
    program_->set_name(program.name);
    for (ValueId out : graph_.outputs) output_or_update_[out] = true;
    for (const StateUpdate& update : graph_.updates) output_or_update_[update.new_value] = true;
  }

  Status run() {
    CLEAVE_TRY(lowerParameters());
    lowerInputs();
    lowerNodes();
    lowerUpdatesAndOutputs();
    return Status::ok();
  }

 private:
  int32_t addBuffer(const std::string& name, const TensorType& type, planpb::BufferKind kind,
                    int32_t alias_of = kNoBuffer) {
    int32_t id = rank_.buffers_size();
    planpb::Buffer* buffer = rank_.add_buffers();
    buffer->set_id(id);
    buffer->set_name(name);
    toProto(type, buffer->mutable_type());
    buffer->set_kind(kind);
    if (alias_of != kNoBuffer) buffer->set_alias_of(alias_of);
    return id;
  }

  const std::string& nameOf(ValueId v) const { return graph_.values[v].name; }
  int32_t rootOf(ValueId v) const { return storageRoot(rank_, buffer_of_[v]); }

  // 1. Parameters: one persistent buffer per name for the whole rank, with its initializer.
  Status lowerParameters() {
    for (const Param& param : graph_.params) {
      const Value& value = graph_.values[param.value];
      auto known = param_buffers_.find(value.name);
      if (known != param_buffers_.end()) {
        auto earlier = fromProto(rank_.buffers(known->second).type());
        if (!earlier || *earlier != value.type)
          return Status::badInput(where_ + "parameter '%" + value.name + "' is " + value.type.str() +
                                  " here but " + (earlier ? earlier->str() : "invalid") + " in an earlier program");
        buffer_of_[param.value] = known->second;
        continue;
      }
      planpb::BufferKind kind =
          isOptimizerState(value.name, param.trainable) ? planpb::BUFFER_OPTIMIZER_STATE : planpb::BUFFER_PARAM;
      int32_t id = addBuffer(value.name, value.type, kind);
      planpb::Parameter* entry = rank_.add_parameters();
      entry->set_name(value.name);
      entry->set_buffer(id);
      for (int64_t d : param.full_shape) entry->add_full_shape(d);
      for (int64_t d : param.shard_offset) entry->add_shard_offset(d);
      toProto(param.model, entry);
      for (const Param::ShardStep& step : param.shard_steps) {
        planpb::ShardStep* added = entry->add_shard_steps();
        added->set_dim(static_cast<int32_t>(step.dim));
        added->set_axis(step.axis);
        added->set_step(step.step);
      }
      *entry->mutable_init() = initializerProto(param.init);
      entry->set_trainable(param.trainable);
      param_buffers_.emplace(value.name, id);
      buffer_of_[param.value] = id;
    }
    return Status::ok();
  }

  // 2. Graph inputs: buffers the runtime fills before the program runs.
  void lowerInputs() {
    for (ValueId v : graph_.inputs) {
      buffer_of_[v] = addBuffer(nameOf(v), graph_.values[v].type, planpb::BUFFER_INPUT);
      planpb::NamedBuffer* input = program_->add_inputs();
      input->set_name(nameOf(v));
      input->set_buffer(buffer_of_[v]);
    }
  }

  planpb::BufferKind resultKind(ValueId v, const std::set<ValueId>& outputs) const {
    if (outputs.count(v)) return planpb::BUFFER_OUTPUT;
    if (isParameterGradient(graph_, nameOf(v))) return planpb::BUFFER_GRADIENT;
    return planpb::BUFFER_ACTIVATION;
  }

  // 3. Nodes: views alias their operand's storage and emit nothing; every other node is a kernel.
  void lowerNodes() {
    const std::set<ValueId> outputs(graph_.outputs.begin(), graph_.outputs.end());
    const std::vector<std::vector<int32_t>> users = graph_.computeUsers();
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
      const Node& node = graph_.nodes[n];
      if (opDef(node.op).view) {
        ValueId result = node.results[0];
        int32_t root = rootOf(node.operands[0]);
        planpb::BufferKind kind = resultKind(result, outputs);
        buffer_of_[result] = addBuffer(nameOf(result), graph_.values[result].type, kind, root);
        // A gradient reached through a view still makes its storage a gradient.
        if (kind == planpb::BUFFER_GRADIENT && rank_.buffers(root).kind() == planpb::BUFFER_ACTIVATION)
          rank_.mutable_buffers(root)->set_kind(planpb::BUFFER_GRADIENT);
        continue;
      }
      instruction_of_node_[n] = program_->instructions_size();
      planpb::Instruction* instruction = program_->add_instructions();
      instruction->set_kind(planpb::KERNEL);
      instruction->set_op(std::string(opName(node.op)));
      instruction->set_microbatch(n < node_microbatch_.size() ? node_microbatch_[n] : -1);
      instruction->set_backward(n < node_backward_.size() && node_backward_[n]);
      for (const auto& [attr_name, attr] : node.attrs) toProto(attr, &(*instruction->mutable_attrs())[attr_name]);
      for (ValueId v : node.operands) instruction->add_operands(buffer_of_[v]);
      const bool in_place = (node.op == OpId::all_reduce && readOnlyHere(node, n, users)) || accumulatesInPlace(node, n, users);
      for (size_t r = 0; r < node.results.size(); ++r) {
        ValueId v = node.results[r];
        int32_t alias = in_place ? rootOf(node.operands[r]) : kNoBuffer;
        buffer_of_[v] = addBuffer(nameOf(v), graph_.values[v].type, resultKind(v, outputs), alias);
        instruction->add_results(buffer_of_[v]);
      }
      if (node.loc.known()) instruction->set_source(node.loc.str());
      if (opDef(node.op).isCommunication()) lowerCommunication(node, *instruction);
    }
  }

  // Whether every operand of `node` (node index n) is an activation no other node, output or update reads.
  bool readOnlyHere(const Node& node, size_t n, const std::vector<std::vector<int32_t>>& users) const {
    for (ValueId v : node.operands)
      if (!readOnlyHere(v, n, users)) return false;
    return true;
  }

  // Whether activation `v` is read by node n alone (no other node, output or update reads it).
  bool readOnlyHere(ValueId v, size_t n, const std::vector<std::vector<int32_t>>& users) const {
    int32_t root = rootOf(v);
    if (rank_.buffers(root).kind() != planpb::BUFFER_ACTIVATION && rank_.buffers(root).kind() != planpb::BUFFER_GRADIENT)
      return false;
    if (users[v].size() != 1 || users[v][0] != static_cast<int32_t>(n)) return false;
    if (root != buffer_of_[v]) return false;  // a view: its root may have other readers
    return !isOutputOrUpdate(v);
  }

  // Whether `node`, in a program of a partitioned or microbatched plan, is add(sum, part) of one
  // type whose `sum` no one else reads: its result then takes the sum's buffer, so gradients summed
  // over microbatches (from zeros, sumMicrobatchGradientsFromZeros) need one copy, as PyTorch's
  // `.grad +=`, not one per microbatch.
  bool accumulatesInPlace(const Node& node, size_t n, const std::vector<std::vector<int32_t>>& users) const {
    if (node.op != OpId::add || n >= node_microbatch_.size()) return false;
    const ValueId sum = node.operands[0], part = node.operands[1];
    const TensorType& type = graph_.values[node.results[0]].type;
    if (graph_.values[sum].type != type || rootOf(part) == rootOf(sum)) return false;
    // A sum that is itself an in-place sum shares its root with values no one reads any more.
    const bool own_buffer = accumulated_in_place_.count(sum) > 0;
    if (own_buffer) accumulated_in_place_.erase(sum);
    if (!own_buffer && !readOnlyHere(sum, n, users)) return false;
    if (own_buffer && (users[sum].size() != 1 || isOutputOrUpdate(sum))) return false;
    accumulated_in_place_.insert(node.results[0]);
    return true;
  }

  bool isOutputOrUpdate(ValueId v) const { return output_or_update_[v]; }

  // Turns a communication node's kernel instruction into its communication instruction.
  void lowerCommunication(const Node& node, planpb::Instruction& instruction) const {
    OpContext attrs{opDef(node.op), {}, {}, node.attrs};
    auto setGroup = [&]() {
      const std::vector<int64_t>& stages = node.op == OpId::all_reduce ? attrs.getInts("stages") : std::vector<int64_t>{};
      if (!stages.empty()) {  // the pipeline stages sharing a parameter, at this rank's dp and tp place
        for (int64_t stage : stages) instruction.add_group(mesh_.rankOf(coord_.with(kPipelineAxis, static_cast<int>(stage))));
        return;
      }
      for (int member : mesh_.group(coord_, attrs.getString("axis"))) instruction.add_group(member);
    };
    instruction.set_stream(1);
    switch (node.op) {
      case OpId::all_reduce:
        instruction.set_kind(planpb::ALL_REDUCE);
        instruction.set_reduce_op(attrs.getString("reduce"));
        setGroup();
        break;
      case OpId::all_gather:
        instruction.set_kind(planpb::ALL_GATHER);
        setGroup();
        break;
      case OpId::reduce_scatter:
        instruction.set_kind(planpb::REDUCE_SCATTER);
        instruction.set_reduce_op(attrs.getString("reduce"));
        setGroup();
        break;
      case OpId::all_to_all:
        instruction.set_kind(planpb::ALL_TO_ALL);
        setGroup();
        break;
      case OpId::send:
      case OpId::recv: {
        instruction.set_kind(node.op == OpId::send ? planpb::SEND : planpb::RECV);
        const MeshCoord peer = coord_.with(kPipelineAxis, static_cast<int>(attrs.getInt("peer_stage")));
        instruction.set_peer(mesh_.rankOf(peer));
        instruction.set_tag(static_cast<int32_t>(attrs.getInt("tag")));
        break;
      }
      case OpId::shard_slice: {
        // This rank's block along dim: a plain slice kernel on the compute stream.
        int64_t dim = normalizeAxis(attrs.getInt("dim"), graph_.values[node.operands[0]].type.rank());
        int64_t block = graph_.values[node.results[0]].type.shape[dim];
        int64_t start = coord_[attrs.getString("axis")] * block;
        instruction.set_op("slice");
        instruction.set_stream(0);
        instruction.set_shard_axis(attrs.getString("axis"));
        instruction.clear_attrs();
        toProto(Attribute(std::vector<int64_t>{start}), &(*instruction.mutable_attrs())["starts"]);
        toProto(Attribute(std::vector<int64_t>{start + block}), &(*instruction.mutable_attrs())["ends"]);
        toProto(Attribute(std::vector<int64_t>{dim}), &(*instruction.mutable_attrs())["axes"]);
        return;
      }
      default:
        return;
    }
    instruction.clear_op();
  }

  // Whether `update` may compute its new value straight into the parameter's storage: the new
  // value comes from an in-place op that reads the parameter only through same-typed operands,
  // and nothing reads the parameter after that op (no later instruction, output or copy).
  bool canUpdateInPlace(const StateUpdate& update, const std::vector<int>& last_read,
                        const std::set<int32_t>& read_at_end) const {
    const Value& new_value = graph_.values[update.new_value];
    const int32_t target_root = buffer_of_[update.target];
    if (new_value.producer < 0) return false;
    const Node& producer = graph_.nodes[new_value.producer];
    if (opDef(producer.op).view || !opDef(producer.op).in_place) return false;
    if (rank_.buffers(buffer_of_[update.new_value]).has_alias_of()) return false;  // already in place elsewhere
    if (last_read[target_root] > instruction_of_node_[new_value.producer] || read_at_end.count(target_root)) return false;
    for (ValueId operand : producer.operands)
      if (rootOf(operand) == target_root && graph_.values[operand].type != new_value.type) return false;
    return true;
  }

  void emitCopy(int32_t from, int32_t to, const std::string& source) {
    planpb::Instruction* copy = program_->add_instructions();
    copy->set_kind(planpb::COPY);
    copy->set_microbatch(-1);
    copy->add_operands(from);
    copy->add_results(to);
    copy->set_source(source);
  }

  // Copies `v` into a new buffer of `kind` now, before the update copies overwrite it.
  int32_t snapshot(ValueId v, planpb::BufferKind kind) {
    int32_t copy = addBuffer(nameOf(v) + ".snapshot", graph_.values[v].type, kind);
    emitCopy(buffer_of_[v], copy, "snapshot of %" + nameOf(v) + " before state updates");
    return copy;
  }

  // 4. State updates, in place or by copies at the end, then the program's outputs. Outputs and
  //    copies that read a parameter updated by copy read a snapshot taken before the copies.
  void lowerUpdatesAndOutputs() {
    // Last instruction reading each storage, and storages read after the program's instructions.
    std::vector<int> last_read(rank_.buffers_size(), -1);
    for (int i = 0; i < program_->instructions_size(); ++i)
      for (int32_t id : program_->instructions(i).operands())
        last_read[storageRoot(rank_, id)] = std::max(last_read[storageRoot(rank_, id)], i);
    std::set<int32_t> read_at_end;
    for (ValueId v : graph_.outputs) read_at_end.insert(rootOf(v));
    for (const StateUpdate& update : graph_.updates) read_at_end.insert(rootOf(update.new_value));

    struct PendingCopy {
      ValueId new_value;
      int32_t from;
      int32_t to;
      std::string source;
    };
    std::vector<PendingCopy> update_copies;
    std::set<int32_t> copied_targets;
    // The verifier has checked that targets are parameters, each updated once, with same-typed values.
    for (const StateUpdate& update : graph_.updates) {
      const int32_t target = buffer_of_[update.target];
      if (rootOf(update.new_value) == target) continue;  // the new value already lives in the parameter
      if (canUpdateInPlace(update, last_read, read_at_end)) {
        rank_.mutable_buffers(buffer_of_[update.new_value])->set_alias_of(target);
      } else {
        std::string source = "update %" + nameOf(update.target) + " = %" + nameOf(update.new_value);
        update_copies.push_back({update.new_value, buffer_of_[update.new_value], target, std::move(source)});
        copied_targets.insert(target);
      }
    }

    std::set<ValueId> listed;
    for (ValueId v : graph_.outputs) {
      if (!listed.insert(v).second) continue;
      int32_t buffer = buffer_of_[v];
      if (copied_targets.count(rootOf(v))) buffer = snapshot(v, planpb::BUFFER_OUTPUT);
      planpb::NamedBuffer* output = program_->add_outputs();
      output->set_name(nameOf(v));
      output->set_buffer(buffer);
    }
    for (PendingCopy& copy : update_copies)
      if (copied_targets.count(rootOf(copy.new_value))) copy.from = snapshot(copy.new_value, planpb::BUFFER_ACTIVATION);
    for (const PendingCopy& copy : update_copies) emitCopy(copy.from, copy.to, copy.source);
  }

  const Graph& graph_;
  const DeviceMesh& mesh_;
  const MeshCoord coord_;
  planpb::RankPlan& rank_;
  std::map<std::string, int32_t>& param_buffers_;
  planpb::Program* program_;
  const std::string where_;
  std::vector<int32_t> buffer_of_;           // value -> buffer id
  std::vector<int> instruction_of_node_;     // node -> instruction index (-1 for views)
  std::vector<int> node_microbatch_;         // pipeline labels per node (may be empty)
  std::vector<bool> node_backward_;
  std::vector<bool> output_or_update_;  // by value: a program output or a state update's new value
  mutable std::set<ValueId> accumulated_in_place_;  // sums written over their operand's buffer (accumulatesInPlace)
};

}  // namespace

bool isOptimizerState(std::string_view param_name, bool trainable) {
  if (trainable) return false;
  if (param_name == kStepCounterName) return true;
  return std::any_of(kOptimizerStateMarkers.begin(), kOptimizerStateMarkers.end(),
                     [&](std::string_view marker) { return param_name.find(marker) != std::string_view::npos; });
}

bool isParameterGradient(const Graph& graph, std::string_view value_name) {
  if (value_name.size() <= kGradientSuffix.size() || !value_name.ends_with(kGradientSuffix)) return false;
  ValueId param = graph.findValue(value_name.substr(0, value_name.size() - kGradientSuffix.size()));
  return param != kNoValue && graph.findParam(param) != nullptr;
}



namespace {

// Copies the offsets, arena and peaks of `planned`, a rank lowered from the same graphs: its
// buffers and instructions are the same, only collective groups, peers and batch offsets differ.
Status copyMemoryLayout(const planpb::RankPlan& planned, planpb::RankPlan& rank) {
  if (planned.buffers_size() != rank.buffers_size() || planned.programs_size() != rank.programs_size())
    return Status::internal("lowerToPlan: ranks " + std::to_string(planned.rank()) + " and " +
                            std::to_string(rank.rank()) + " share graphs but not buffers");
  for (int32_t id = 0; id < rank.buffers_size(); ++id) rank.mutable_buffers(id)->set_offset(planned.buffers(id).offset());
  for (int p = 0; p < rank.programs_size(); ++p) rank.mutable_programs(p)->set_peak_bytes(planned.programs(p).peak_bytes());
  rank.set_persistent_bytes(planned.persistent_bytes());
  rank.set_arena_bytes(planned.arena_bytes());
  return Status::ok();
}

// The rank's number and mesh coordinates.
void setCoordinates(const DeviceMesh& mesh, MeshCoord coord, planpb::RankPlan& rank) {
  rank.set_rank(mesh.rankOf(coord));
  rank.set_stage(coord.stage());
  rank.set_dp_index(coord[kDataAxis]);
  rank.set_tp_index(coord[kTensorAxis]);
}

// Lowers one rank's graphs into `rank` and plans its memory; with `same_graphs`, a rank lowered
// from the very same graphs, the graphs are not verified again and its memory layout is reused.
Status lowerRank(const std::vector<ProgramGraph>& programs, const DeviceMesh& mesh, MeshCoord coord,
                 const std::set<std::string>& batch_split, const planpb::RankPlan* same_graphs, planpb::RankPlan& rank) {
  setCoordinates(mesh, coord, rank);
  const std::string where = mesh.size() > 1 ? "rank " + std::to_string(mesh.rankOf(coord)) + ", " : "";
  // 1. Each graph becomes a program; parameters are shared by name.
  std::map<std::string, int32_t> param_buffers;
  std::set<std::string> names;
  for (const ProgramGraph& program : programs) {
    if (!program.graph || program.name.empty()) return Status::internal("lowerToPlan: a program lacks a name or graph");
    if (!names.insert(program.name).second)
      return Status::badInput("program '" + program.name + "' is given twice");
  }
  if (!same_graphs)
    CLEAVE_TRY(runParallelTasks(programs.size(), [&](size_t p) {
      return verifyGraph(*programs[p].graph).withContext(where + "program '" + programs[p].name + "': ");
    }));
  for (const ProgramGraph& program : programs) CLEAVE_TRY(ProgramLowering(program, rank, param_buffers, mesh, coord).run());
  // 2. Batch inputs and outputs say which rows of the global batch they hold.
  for (auto& program : *rank.mutable_programs()) {
    for (auto* list : {program.mutable_inputs(), program.mutable_outputs()})
      for (auto& named : *list)
        if (batch_split.count(named.name())) {
          named.set_batch_split(true);
          named.set_batch_offset(coord[kDataAxis] * rank.buffers(named.buffer()).type().shape(0));
        }
  }
  // 3. Aliases name their storage's root directly; then offsets.
  for (int32_t id = 0; id < rank.buffers_size(); ++id)
    if (rank.buffers(id).has_alias_of()) rank.mutable_buffers(id)->set_alias_of(storageRoot(rank, id));
  return same_graphs ? copyMemoryLayout(*same_graphs, rank) : planMemory(rank);
}

}  // namespace

Expected<planpb::Plan> lowerToPlan(const LoweringInput& input) {
  if (input.programs.empty() && input.ranks.empty()) return Status::badInput("nothing to lower: no graphs given");
  if (!input.ranks.empty() && static_cast<int>(input.ranks.size()) != input.mesh.size())
    return Status::internal("lowerToPlan: " + std::to_string(input.ranks.size()) + " ranks given for a mesh of " +
                            std::to_string(input.mesh.size()));
  planpb::Plan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_producer(input.producer);
  plan.set_model_name(input.model_name);
  plan.set_model_file(input.model_file);
  plan.set_devices(input.ranks.empty() ? 1 : input.mesh.size());
  plan.set_global_batch(input.global_batch);
  planpb::Strategy* strategy = plan.mutable_strategy();
  strategy->set_dp(input.ranks.empty() ? 1 : input.mesh.dp());
  strategy->set_tp(input.ranks.empty() ? 1 : input.mesh.tp());
  strategy->set_pp(input.ranks.empty() ? 1 : input.mesh.pp());
  strategy->set_microbatches(input.microbatches);
  strategy->set_schedule(input.schedule);

  if (input.ranks.empty()) {
    CLEAVE_TRY(lowerRank(input.programs, DeviceMesh{}, MeshCoord{}, {}, nullptr, *plan.add_ranks()));
  } else {
    // Ranks lowered from graphs no earlier rank has are lowered in parallel; then those that copy
    // an earlier rank's memory layout (share_programs off).
    std::map<std::vector<const Graph*>, int> lowered_from;  // a rank's graphs -> the first rank lowered from them
    std::vector<int> fresh_ranks, copying_ranks;
    std::vector<int> same_as(input.ranks.size(), -1);
    for (int r = 0; r < static_cast<int>(input.ranks.size()); ++r) {
      const RankGraphs& rank = input.ranks[r];
      std::vector<const Graph*> graphs;
      for (const ProgramGraph& program : rank.programs) graphs.push_back(program.graph);
      auto [first, fresh] = lowered_from.emplace(graphs, r);
      planpb::RankPlan& lowered = *plan.add_ranks();
      if (fresh) {
        fresh_ranks.push_back(r);
        continue;
      }
      same_as[r] = first->second;
      if (input.share_programs) {
        setCoordinates(input.mesh, rank.coord, lowered);
        lowered.set_same_program_as(first->second);
      } else {
        copying_ranks.push_back(r);
      }
    }
    for (const std::vector<int>* ranks : {&fresh_ranks, &copying_ranks}) {
      CLEAVE_TRY(runParallelTasks(ranks->size(), [&](size_t i) {
        const int r = (*ranks)[i];
        const RankGraphs& rank = input.ranks[r];
        const planpb::RankPlan* same_graphs = same_as[r] >= 0 ? &plan.ranks(same_as[r]) : nullptr;
        return lowerRank(rank.programs, input.mesh, rank.coord, rank.batch_split, same_graphs, *plan.mutable_ranks(r));
      }));
    }
  }
  Status valid = validatePlan(plan);
  if (!valid) return Status::internal("lowering produced an invalid plan: " + valid.message());
  return plan;
}

}  // namespace cleave
