// SPMD partitioning: rewrites a model graph into one device's graph with local shapes and collectives.
#include "passes/partition/spmd_partitioner.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "ir/op_table.h"
#include "ir/sharding_rule.h"

namespace cleave {

bool ValueSharding::isPartial() const {
  return std::any_of(partial.begin(), partial.end(), [](Partial p) { return p != Partial::kNone; });
}

bool ValueSharding::replicatedOver(int8_t axis) const {
  if (axis >= 0 && static_cast<size_t>(axis) < partial.size() && partial[axis] != Partial::kNone) return false;
  return std::none_of(dim_axis.begin(), dim_axis.end(), [&](int8_t a) { return a == axis; });
}

std::string ValueSharding::str(const DeviceMesh& mesh) const {
  std::string s = "[";
  for (size_t i = 0; i < dim_axis.size(); ++i) {
    if (i) s += ',';
    s += dim_axis[i] == kReplicated ? std::string("-") : mesh.axes()[dim_axis[i]].name;
  }
  s += ']';
  for (size_t a = 0; a < partial.size(); ++a)
    if (partial[a] != Partial::kNone)
      s += " partial(" + mesh.axes()[a].name + (partial[a] == Partial::kSum ? ":sum)" : ":mean)");
  return s;
}

namespace {

constexpr int8_t kNoAxis = ValueSharding::kReplicated;

// For each dim of a reshape's input, the result dim a split of it becomes (-1: none): the dims of
// both shapes are grouped where their element counts agree, and a group's leading input dim (of
// size above 1) becomes its leading result dim.
std::vector<int> reshapeLeadingDims(const Shape& in, const Shape& out) {
  std::vector<int> lead_out_of(in.size(), -1);
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    int64_t in_count = 1, out_count = 1;
    int lead_in = -1, lead_out = -1;
    bool started = false;
    while (!started || in_count != out_count) {
      started = true;
      if ((in_count <= out_count && i < in.size()) || j >= out.size()) {
        if (lead_in < 0 && in[i] > 1) lead_in = static_cast<int>(i);
        in_count *= in[i++];
      } else {
        if (lead_out < 0 && out[j] > 1) lead_out = static_cast<int>(j);
        out_count *= out[j++];
      }
      if (i >= in.size() && j >= out.size()) break;
    }
    if (lead_in >= 0) lead_out_of[static_cast<size_t>(lead_in)] = lead_out;
  }
  return lead_out_of;
}

// The result dim a split of input dim `d` over `parts` devices lands on through a reshape from `in`
// to `out`, or -1 when the split cannot follow (it is not its group's leading dim, or that result dim
// does not divide by `parts`) and the input is gathered first.
int reshapedSplitDim(const Shape& in, const Shape& out, size_t d, int64_t parts) {
  const int lead = reshapeLeadingDims(in, out)[d];
  return lead >= 0 && out[static_cast<size_t>(lead)] % parts == 0 ? lead : -1;
}

class DevicePartitioner {
 public:
  DevicePartitioner(const Graph& global, const DeviceMesh& mesh, MeshCoord coord, const std::set<std::string>& whole,
                    bool sequence_parallel)
      : whole_(whole),
        sequence_parallel_(sequence_parallel),
        global_(global),
        mesh_(mesh),
        coord_(coord),
        dp_(static_cast<int8_t>(mesh.axisIndex(kDataAxis))),
        tp_(static_cast<int8_t>(mesh.axisIndex(kTensorAxis))),
        local_of_(global.values.size(), kNoValue),
        sharding_of_(global.values.size()),
        carries_gradient_(global.values.size(), false),
        batch_dependent_(global.values.size(), false),
        use_count_(global.values.size(), 0),
        users_(global.computeUsers()) {
    local_.name = global.name;
    for (const Node& node : global.nodes)
      for (ValueId v : node.operands) ++use_count_[v];
    for (ValueId v : global.outputs) ++use_count_[v];
    for (const StateUpdate& update : global.updates) {
      ++use_count_[update.target];
      ++use_count_[update.new_value];
    }
  }

  Expected<Graph> run(TensorParallelReport* report) {
    markDependencies();
    CLEAVE_TRY(partitionInputs());
    for (size_t i = 0; i < global_.nodes.size(); ++i) {
      const Node& node = global_.nodes[i];
      // A transpose of a weight not laid out yet (torch.export writes nn.Linear as matmul(x,
      // transpose(W))), or a view adding or dropping unit dims (a 1-D convolution's weight
      // unsqueezed for conv2d), waits for its user, which chooses the layout through it.
      if (isWeightView(node) && isPendingParam(node.operands[0])) {
        pending_views_.emplace(node.results[0], static_cast<int32_t>(i));
        continue;
      }
      CLEAVE_TRY(partitionNode(node));
    }
    for (const auto& [view, node] : pending_views_)  // views nothing used (dead code)
      if (local_of_[view] == kNoValue) CLEAVE_TRY(createParam(view, replicatedLayout(view)));
    // A parameter only a state update writes (BatchNorm's running statistics under training) takes
    // its new value's layout, so a tp rank keeps the channels its split layer computes.
    for (const StateUpdate& update : global_.updates) {
      if (!isPendingParam(update.target) || global_.values[update.target].type != global_.values[update.new_value].type)
        continue;
      ValueSharding layout = sharding_of_[update.new_value];
      std::fill(layout.partial.begin(), layout.partial.end(), ValueSharding::Partial::kNone);
      for (int8_t& a : layout.dim_axis)
        if (a == dp_) a = kNoAxis;
      CLEAVE_TRY(createParam(update.target, std::move(layout)));
    }
    for (const Param& param : global_.params)
      if (local_of_[param.value] == kNoValue && !held_as_.count(param.value))
        CLEAVE_TRY(createParam(param.value, replicatedLayout(param.value)));
    CLEAVE_TRY(partitionOutputs());
    for (const StateUpdate& update : global_.updates) {
      CLEAVE_TRY(resolvePartial(update.new_value));
      CLEAVE_ASSIGN_OR_RETURN(ValueId new_value, reshard(update.new_value, sharding_of_[update.target]));
      local_.updates.push_back({local_of_[update.target], new_value});
    }
    if (report) {
      reportWeights(*report);
      report->sequence_splits = sequence_splits_;
    }
    return std::move(local_);
  }

 private:
  // The weights of weight ops, split or whole (spmd_partitioner.h).
  void reportWeights(TensorParallelReport& report) const {
    std::set<ValueId> seen;
    for (const Node& node : global_.nodes) {
      const int w = opDef(node.op).weight_operand;
      if (w < 0 || static_cast<size_t>(w) >= node.operands.size()) continue;
      const ValueId v = weightBehindViews(node.operands[w]);
      if (!global_.findParam(v) || global_.values[v].type.rank() < 2 || !seen.insert(v).second) continue;
      const auto held = held_as_.find(v);
      const ValueSharding& s = sharding_of_[held == held_as_.end() ? v : held->second];
      const bool split = tp_ != kNoAxis && std::find(s.dim_axis.begin(), s.dim_axis.end(), tp_) != s.dim_axis.end();
      const Value& value = global_.values[v];
      const std::string label = "%" + value.name + " " + value.type.str();
      if (!split && declined_.count(v)) {  // whole by choice: its split would be gathered right away
        report.kept_whole.push_back(label);
        continue;
      }
      (split ? report.split : report.whole).push_back(label);
      (split ? report.split_bytes : report.whole_bytes) += value.type.bytes();
      if (!split && outputFeaturesDivide(node, w)) report.splittable.push_back(label);
    }
  }

  // Whether a pass-through factor of weight operand `w` of `node` that reaches its result (its
  // output features) divides by the tp degree.
  bool outputFeaturesDivide(const Node& node, int w) const {
    const OpDef& def = opDef(node.op);
    std::vector<TensorType> operand_types, result_types;
    for (ValueId v : node.operands) operand_types.push_back(global_.values[v].type);
    for (ValueId v : node.results) result_types.push_back(global_.values[v].type);
    ShardingRule rule = def.sharding(OpContext{def, operand_types, result_types, node.attrs});
    if (static_cast<size_t>(w) >= rule.operand_dims.size() || rule.result_dims.empty()) return false;
    for (int f : rule.operand_dims[w]) {
      if (f == ShardingRule::kNoFactor || rule.factor_kinds[f] != FactorKind::kPassThrough) continue;
      const auto& result = rule.result_dims[0];
      if (std::find(result.begin(), result.end(), f) != result.end() && rule.factor_sizes[f] % mesh_.tp() == 0) return true;
    }
    return false;
  }

  size_t rankOf(ValueId v) const { return global_.values[v].type.shape.size(); }
  ValueSharding replicatedLayout(ValueId v) const { return ValueSharding::replicated(rankOf(v), mesh_.numAxes()); }
  const std::string& axisName(int8_t axis) const { return mesh_.axes()[axis].name; }
  int axisSize(int8_t axis) const { return mesh_.axes()[axis].size; }
  int indexOn(int8_t axis) const { return coord_[axisName(axis)]; }
  std::string where(const Node& node) const { return "partitioning for rank " + std::to_string(mesh_.rankOf(coord_)) + ": " + nodeContext(global_, node); }

  // Which values get gradients (they depend on a trainable parameter) and which scale with the
  // batch (they depend on a graph input or a received value).
  void markDependencies() {
    for (const Param& param : global_.params) carries_gradient_[param.value] = param.trainable;
    for (ValueId v : global_.inputs) batch_dependent_[v] = true;
    for (const Node& node : global_.nodes) {
      bool grad = false, batch = node.op == OpId::recv;
      for (ValueId v : node.operands) {
        grad = grad || carries_gradient_[v];
        batch = batch || batch_dependent_[v];
      }
      for (ValueId r : node.results) {
        // A received activation carries the gradient the stage sends back.
        carries_gradient_[r] = (grad || node.op == OpId::recv) && isFloat(global_.values[r].type.dtype);
        batch_dependent_[r] = batch;
      }
    }
  }

  // The local type of a value of global type `type` laid out as `sharding`.
  TensorType localType(TensorType type, const ValueSharding& sharding) const {
    for (size_t d = 0; d < type.shape.size(); ++d)
      if (sharding.dim_axis[d] != kNoAxis) type.shape[d] /= axisSize(sharding.dim_axis[d]);
    return type;
  }

  // The layout data inputs take: batch rows split over dp.
  ValueSharding batchLayout(ValueId v) const {
    ValueSharding s = replicatedLayout(v);
    if (mesh_.dp() > 1 && !s.dim_axis.empty() && batch_dependent_[v]) s.dim_axis[0] = dp_;
    return s;
  }

  // The layout a pipeline boundary value takes on both stages (each derives it from the value's
  // type alone): batch rows split over dp, or whole where dim 0 does not divide by dp, as a batch
  // statistic BatchNorm keeps [1, C, 1, 1] does.
  ValueSharding boundaryLayout(ValueId v) const {
    ValueSharding s = batchLayout(v);
    if (!s.dim_axis.empty() && s.dim_axis[0] != kNoAxis && global_.values[v].type.shape[0] % mesh_.dp() != 0)
      s.dim_axis[0] = kNoAxis;
    return s;
  }

  Status partitionInputs() {
    for (ValueId v : global_.inputs) {
      const Value& value = global_.values[v];
      ValueSharding s = batchLayout(v);
      if (!s.dim_axis.empty() && s.dim_axis[0] != kNoAxis) {
        if (value.type.shape[0] % mesh_.dp() != 0)
          return Status::badInput("input '%" + value.name + "' has batch " + std::to_string(value.type.shape[0]) +
                                  ", which does not divide into " + std::to_string(mesh_.dp()) +
                                  " data-parallel shards (--dp)");
      }
      CLEAVE_ASSIGN_OR_RETURN(ValueId local, local_.addInput(value.name, localType(value.type, s)));
      bind(v, local, s);
    }
    return Status::ok();
  }

  void bind(ValueId global, ValueId local, ValueSharding s) {
    local_of_[global] = local;
    sharding_of_[global] = std::move(s);
  }

  // A transpose, a reshape-like view whose dims of size above 1 are its operand's, in order, or a
  // held reshape.
  bool isWeightView(const Node& node) const {
    if (node.op == OpId::transpose) return true;
    return opDef(node.op).reshape_like && node.operands.size() == 1 &&
           (!viewSourceDims(global_.values[node.operands[0]].type.shape, global_.values[node.results[0]].type.shape).empty() ||
            isHeldReshape(node));
  }

  // Under tp, a reshape that moves elements between dims and is the only use of a parameter with
  // stored data (a fused projection's weight [in, parts·out] as [in, parts, out],
  // passes/partition/fused_projections.h): the parameter is held in the reshaped shape
  // (Param::model records the model's), so that a dim the reshape makes can be split.
  bool isHeldReshape(const Node& node) const {
    if (mesh_.tp() == 1 || node.op != OpId::reshape || node.operands.size() != 1) return false;
    const Param* param = global_.findParam(node.operands[0]);
    return param && param->init.kind == "data" && param->init.data && use_count_[node.operands[0]] == 1 &&
           viewSourceDims(global_.values[node.operands[0]].type.shape, global_.values[node.results[0]].type.shape).empty();
  }

  // For a view that only adds or drops unit dims: per view dim, the operand dim it is (-1 for a
  // unit dim); empty when the view moves elements between dims.
  static std::vector<int> viewSourceDims(const Shape& source, const Shape& view) {
    std::vector<int> map(view.size(), -1);
    size_t j = 0;
    for (size_t d = 0; d < view.size(); ++d) {
      if (view[d] == 1) continue;
      while (j < source.size() && source[j] == 1) ++j;
      if (j == source.size() || source[j] != view[d]) return {};
      map[d] = static_cast<int>(j++);
    }
    while (j < source.size() && source[j] == 1) ++j;
    return j == source.size() ? map : std::vector<int>{};
  }

  // Creates parameter `v` in the local graph with layout `s` (its block of the whole tensor); for a
  // pending view of a parameter, the parameter in the matching layout, then the view.
  Status createParam(ValueId v, ValueSharding s) {
    if (auto view = pending_views_.find(v); view != pending_views_.end()) {
      const Node& node = global_.nodes[view->second];
      const ValueId source = node.operands[0];
      if (isHeldReshape(node)) {
        pending_views_.erase(view);
        held_as_.emplace(source, v);
        return addLocalParam(source, v, std::move(s));
      }
      ValueSharding source_layout = replicatedLayout(source);
      AttrMap attrs = node.attrs;
      if (node.op == OpId::transpose) {
        std::vector<int64_t> perm = OpContext{opDef(node.op), {}, {}, node.attrs}.getInts("perm");
        if (perm.empty())  // no perm: the dims reversed
          for (int64_t d = static_cast<int64_t>(rankOf(source)); d-- > 0;) perm.push_back(d);
        for (size_t d = 0; d < perm.size() && d < s.dim_axis.size(); ++d) source_layout.dim_axis[perm[d]] = s.dim_axis[d];
      } else {
        const std::vector<int> dims = viewSourceDims(global_.values[source].type.shape, global_.values[v].type.shape);
        for (size_t d = 0; d < dims.size(); ++d)
          if (dims[d] >= 0) source_layout.dim_axis[dims[d]] = s.dim_axis[d];
        const OpDef& def = opDef(node.op);
        if (!def.result_shape_attr.empty())
          attrs[std::string(def.result_shape_attr)] = localType(global_.values[v].type, s).shape;
      }
      if (isPendingParam(source)) CLEAVE_TRY(createParam(source, source_layout));
      CLEAVE_ASSIGN_OR_RETURN(ValueId local_source, reshard(source, source_layout));
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                              local_.addNode(node.op, {local_source}, std::move(attrs), node.loc, {global_.values[v].name}));
      pending_views_.erase(view);
      bind(v, results[0], std::move(s));
      return Status::ok();
    }
    return addLocalParam(v, v, std::move(s));
  }

  // Parameter `param` in the local graph as value `held` (itself, or its held reshape) laid out as
  // `s`: its block of the whole tensor of held's shape.
  Status addLocalParam(ValueId param_value, ValueId held, ValueSharding s) {
    const Param& param = *global_.findParam(param_value);
    const Value& value = global_.values[param_value];
    const TensorType& whole = global_.values[held].type;
    if (whole_.count(value.name)) s = replicatedLayout(held);  // users take their blocks by resharding
    TensorType local_type = localType(whole, s);
    Shape offset;
    for (size_t d = 0; d < s.dim_axis.size(); ++d)
      offset.push_back(s.dim_axis[d] == kNoAxis ? 0 : indexOn(s.dim_axis[d]) * local_type.shape[d]);
    Initializer init = param.init;
    if (init.kind == "data" && local_type != value.type) {  // an imported weight: this device keeps its block
      TensorData reshaped = *init.data;
      reshaped.type.shape = whole.shape;  // the same elements in the held shape
      init.data = std::make_shared<const TensorData>(dataBlock(reshaped, offset, local_type.shape));
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId local, local_.addParam(value.name, local_type, std::move(init), param.trainable));
    Param& added = local_.params.back();
    // Held reshaped here, or as the graph holds it (grouped by fused-projections, or the model's).
    added.model = held != param_value ? HeldLayout{value.type.shape, {}, 0} : param.model;
    if (local_type != whole) {
      added.full_shape = whole.shape;
      added.shard_offset = std::move(offset);
      for (size_t d = 0; d < s.dim_axis.size(); ++d)
        if (s.dim_axis[d] != kNoAxis)
          added.shard_steps.push_back({static_cast<int64_t>(d), axisName(s.dim_axis[d]), local_type.shape[d]});
    }
    bind(held, local, std::move(s));
    return Status::ok();
  }

  // A parameter (or a pending transpose of one) that has no layout yet: its first user chooses it.
  bool isPendingParam(ValueId v) const {
    return local_of_[v] == kNoValue && (global_.findParam(v) != nullptr || pending_views_.count(v) != 0);
  }

  // ---- Communication emitted while resharding ----

  AttrMap groupAttrs(int8_t axis) const {
    return AttrMap{{"axis", axisName(axis)},
                   {"group_size", static_cast<int64_t>(axisSize(axis))}};
  }

  Expected<ValueId> emit(OpId op, std::vector<ValueId> operands, AttrMap attrs, const std::string& name) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            local_.addNode(op, std::move(operands), std::move(attrs), {}, {name}));
    return results[0];
  }

  // True when `v` (global), a partial sum over tp, may be reduce-scattered along its sequence dim
  // (sequence parallelism): a float [batch, sequence, ...] value whose sequence dim is whole here
  // and divides by tp.
  bool splitsAlongSequence(ValueId v) const {
    const ValueSharding& s = sharding_of_[v];
    const TensorType& type = global_.values[v].type;
    return sequence_parallel_ && tp_ != kNoAxis && mesh_.tp() > 1 && isFloat(type.dtype) && type.rank() >= 3 &&
           s.partial[tp_] == ValueSharding::Partial::kSum && s.dim_axis[1] == kNoAxis &&
           type.shape[1] % mesh_.tp() == 0;
  }

  // Makes `v` (global) whole over every axis it is partial over; with `along_sequence`, a partial
  // sum over tp that splitsAlongSequence is reduce-scattered along dim 1 instead.
  Status resolvePartial(ValueId v, bool along_sequence = false) {
    ValueSharding& s = sharding_of_[v];
    if (along_sequence && splitsAlongSequence(v)) {
      AttrMap attrs = groupAttrs(tp_);
      attrs.emplace("dim", int64_t{1});
      attrs.emplace("reduce", std::string("sum"));
      CLEAVE_ASSIGN_OR_RETURN(local_of_[v], emit(OpId::reduce_scatter, {local_of_[v]}, std::move(attrs),
                                                 global_.values[v].name + ".scattered"));
      s.partial[tp_] = ValueSharding::Partial::kNone;
      s.dim_axis[1] = tp_;
      ++sequence_splits_;
    }
    for (size_t a = 0; a < s.partial.size(); ++a) {
      if (s.partial[a] == ValueSharding::Partial::kNone) continue;
      AttrMap attrs = groupAttrs(static_cast<int8_t>(a));
      attrs.emplace("reduce", std::string(s.partial[a] == ValueSharding::Partial::kSum ? "sum" : "mean"));
      CLEAVE_ASSIGN_OR_RETURN(local_of_[v], emit(OpId::all_reduce, {local_of_[v]}, std::move(attrs),
                                                 global_.values[v].name + ".reduced"));
      s.partial[a] = ValueSharding::Partial::kNone;
    }
    return Status::ok();
  }

  // The local value of `v` laid out as `target` (which has no partial axes; `v` has none either);
  // with `sum_gradient`, its gathers sum their gradients (all_gather's sum_gradient). Such a gather
  // is cached apart: every user of it must give a partial gradient, or the sum counts a whole one
  // tp times.
  Expected<ValueId> reshard(ValueId v, const ValueSharding& target, bool sum_gradient = false) {
    ValueSharding current = sharding_of_[v];
    if (current == target) return local_of_[v];
    const std::string key = target.str(mesh_) + (sum_gradient ? " summing gradients" : "");
    auto cached = reshard_cache_.find({v, key});
    if (cached != reshard_cache_.end()) return cached->second;
    ValueId local = local_of_[v];
    const std::string& name = global_.values[v].name;
    for (size_t d = 0; d < target.dim_axis.size(); ++d) {
      if (current.dim_axis[d] == target.dim_axis[d]) continue;
      AttrMap dim_attr{{"dim", static_cast<int64_t>(d)}};
      if (current.dim_axis[d] != kNoAxis) {
        AttrMap attrs = groupAttrs(current.dim_axis[d]);
        attrs.merge(AttrMap(dim_attr));
        if (sum_gradient) attrs.emplace("sum_gradient", int64_t{1});
        CLEAVE_ASSIGN_OR_RETURN(local, emit(OpId::all_gather, {local}, std::move(attrs), name + ".gathered"));
      }
      if (target.dim_axis[d] != kNoAxis) {
        AttrMap attrs = groupAttrs(target.dim_axis[d]);
        attrs.merge(dim_attr);
        CLEAVE_ASSIGN_OR_RETURN(local, emit(OpId::shard_slice, {local}, std::move(attrs), name + ".block"));
      }
    }
    reshard_cache_.emplace(std::make_pair(v, key), local);
    return local;
  }

  // `local` (the layout of global `v`) marked so its gradient is summed over `axis`; one mark per value and axis.
  Expected<ValueId> gradientSync(ValueId v, ValueId local, int8_t axis) {
    auto key = std::make_pair(local, axis);
    auto cached = sync_cache_.find(key);
    if (cached != sync_cache_.end()) return cached->second;
    CLEAVE_ASSIGN_OR_RETURN(ValueId synced, emit(OpId::grad_all_reduce, {local}, groupAttrs(axis),
                                                 global_.values[v].name + ".synced"));
    sync_cache_.emplace(key, synced);
    return synced;
  }

  // ---- Nodes ----

  Status partitionNode(const Node& node) {
    if (node.op == OpId::constant) return copyReplicated(node);
    if (node.op == OpId::recv) return partitionRecv(node);
    // Sequence parallelism applies where the op's sharding rule places the tokens (not in reshapes,
    // sends or the special tp patterns below).
    const bool by_rule = !opDef(node.op).reshape_like && node.op != OpId::send && !isRowSplitGemmWithC(node) &&
                         !isVocabParallelEmbedding(node) && !isVocabParallelCrossEntropy(node);
    for (ValueId v : node.operands)
      if (!isPendingParam(v)) CLEAVE_TRY(resolvePartial(v, by_rule));
    if (opDef(node.op).reshape_like) return partitionReshape(node);
    if (node.op == OpId::send) return partitionSend(node);
    if (isRowSplitGemmWithC(node)) return partitionRowSplitGemm(node);
    if (isVocabParallelEmbedding(node)) return partitionVocabParallelEmbedding(node);
    if (isVocabParallelCrossEntropy(node)) return partitionVocabParallelCrossEntropy(node);
    return partitionByRule(node);
  }

  // An embedding lookup (gather along dim 0 of a weight with no layout yet) whose rows divide by tp.
  bool isVocabParallelEmbedding(const Node& node) const {
    if (node.op != OpId::gather || tp_ == kNoAxis || mesh_.tp() == 1 || !isPendingParam(node.operands[0]) ||
        pending_views_.count(node.operands[0]) || isPendingParam(node.operands[1]))
      return false;
    const Value& table = global_.values[node.operands[0]];
    if (table.type.rank() != 2 || !isFloat(table.type.dtype) || table.type.shape[0] % mesh_.tp() != 0 ||
        whole_.count(table.name))
      return false;
    return normalizeAxis(OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("axis"), 2) == 0;
  }

  // A scalar constant of `dtype` in the local graph.
  Expected<ValueId> scalarConstant(DType dtype, double value, const std::string& name) {
    auto data = std::make_shared<TensorData>(TensorData{TensorType{dtype, {}}, {}});
    data->bytes.resize(static_cast<size_t>(dtypeSize(dtype)));
    switch (dtype) {
      case DType::kI64: *data->as<int64_t>() = static_cast<int64_t>(value); break;
      case DType::kI32: *data->as<int32_t>() = static_cast<int32_t>(value); break;
      case DType::kF64: *data->as<double>() = value; break;
      case DType::kF32: *data->as<float>() = static_cast<float>(value); break;
      default: return Status::internal("partitioning: no scalar constant of " + std::string(dtypeName(dtype)));
    }
    return emit(OpId::constant, {}, AttrMap{{"value", std::shared_ptr<const TensorData>(data)}}, name);
  }

  // tp index x rows, as this device's block of the constant [0, rows, 2 rows, ...] split over tp: a
  // shard_slice, whose block lowering (and a plan's shared programs) take from the coordinate, so
  // the graph is the same on every tp rank and a constant nowhere folds it away.
  Expected<ValueId> firstRow(DType dtype, int64_t rows, const std::string& name) {
    const int64_t tp = mesh_.tp();
    auto data = std::make_shared<TensorData>(TensorData{TensorType{dtype, {tp}}, {}});
    data->bytes.resize(static_cast<size_t>(dtypeSize(dtype) * tp));
    for (int64_t t = 0; t < tp; ++t) {
      switch (dtype) {
        case DType::kI64: data->as<int64_t>()[t] = t * rows; break;
        case DType::kI32: data->as<int32_t>()[t] = static_cast<int32_t>(t * rows); break;
        default: return Status::internal("partitioning: vocabulary ids of " + std::string(dtypeName(dtype)));
      }
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId firsts, emit(OpId::constant, {}, AttrMap{{"value", std::shared_ptr<const TensorData>(data)}},
                                                 name + "s"));
    AttrMap attrs = groupAttrs(tp_);
    attrs.emplace("dim", int64_t{0});
    CLEAVE_ASSIGN_OR_RETURN(ValueId mine, emit(OpId::shard_slice, {firsts}, std::move(attrs), name + ".block"));
    return emit(OpId::squeeze, {mine}, AttrMap{{"axes", std::vector<int64_t>{0}}}, name);
  }

  // Where this tp rank holds rows [tp index x rows, + rows) of a table split over tp: each id's row in
  // the block (0 for ids outside it), and 1 where the id is inside, else 0 (in the ids' dtype).
  struct LocalRows {
    ValueId index, here;
  };
  Expected<LocalRows> localRows(ValueId ids, int64_t rows, const std::string& name) {
    const DType dtype = local_.values[ids].type.dtype;
    const std::string dtype_name(dtypeName(dtype));
    CLEAVE_ASSIGN_OR_RETURN(ValueId start, firstRow(dtype, rows, name + ".first_row"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId zero, scalarConstant(dtype, 0, name + ".zero"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId count, scalarConstant(dtype, static_cast<double>(rows), name + ".rows"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId shifted, emit(OpId::sub, {ids, start}, {}, name + ".row"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId above, emit(OpId::greater_equal, {shifted, zero}, {}, name + ".above"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId below, emit(OpId::less, {shifted, count}, {}, name + ".below"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId above_n, emit(OpId::cast, {above}, {{"to", dtype_name}}, name + ".above_n"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId below_n, emit(OpId::cast, {below}, {{"to", dtype_name}}, name + ".below_n"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId here, emit(OpId::mul, {above_n, below_n}, {}, name + ".here"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId index, emit(OpId::mul, {shifted, here}, {}, name + ".index"));
    return LocalRows{index, here};
  }

  // Megatron's vocabulary-parallel embedding: each tp rank holds a block of the table's rows, looks
  // up the ids that fall in it (the others read row 0 and are zeroed), and the result is a partial sum
  // over tp (all-reduced where it is needed whole).
  Status partitionVocabParallelEmbedding(const Node& node) {
    const ValueId table = node.operands[0], ids = node.operands[1], y = node.results[0];
    const int64_t rows = global_.values[table].type.shape[0] / mesh_.tp();
    ValueSharding table_layout = replicatedLayout(table);
    table_layout.dim_axis[0] = tp_;
    CLEAVE_TRY(createParam(table, table_layout));
    ValueId local_table = local_of_[table];
    const ValueSharding& ids_layout = sharding_of_[ids];
    if (carries_gradient_[table] && dp_ != kNoAxis && !ids_layout.replicatedOver(dp_)) {
      CLEAVE_ASSIGN_OR_RETURN(local_table, gradientSync(table, local_table, dp_));
    }
    const std::string& name = global_.values[y].name;
    CLEAVE_ASSIGN_OR_RETURN(LocalRows local_rows, localRows(local_of_[ids], rows, name));
    // The lookup in the block; a padding_idx is a global row, kept for the masked lookup below.
    const int64_t padding = OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("padding_idx");
    AttrMap lookup_attrs = node.attrs;
    lookup_attrs.erase("padding_idx");
    CLEAVE_ASSIGN_OR_RETURN(ValueId looked_up,
                            emit(OpId::gather, {local_table, local_rows.index}, lookup_attrs, name + ".rows"));
    const std::string float_name(dtypeName(global_.values[y].type.dtype));
    CLEAVE_ASSIGN_OR_RETURN(ValueId here_f, emit(OpId::cast, {local_rows.here}, {{"to", float_name}}, name + ".here_f"));
    const int64_t id_rank = static_cast<int64_t>(rankOf(ids));
    CLEAVE_ASSIGN_OR_RETURN(ValueId mask, emit(OpId::unsqueeze, {here_f}, {{"axes", std::vector<int64_t>{id_rank}}},
                                                name + ".mask"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId local, emit(OpId::mul, {looked_up, mask}, {}, name + ".local"));
    if (padding >= 0) {  // the padding row's lookups pass their value but no gradient (nn.Embedding's)
      const DType id_dtype = local_.values[local_of_[ids]].type.dtype;
      CLEAVE_ASSIGN_OR_RETURN(ValueId padding_id, scalarConstant(id_dtype, static_cast<double>(padding), name + ".padding_idx"));
      CLEAVE_ASSIGN_OR_RETURN(ValueId is_padding, emit(OpId::equal, {local_of_[ids], padding_id}, {}, name + ".is_padding"));
      CLEAVE_ASSIGN_OR_RETURN(ValueId padding_rows, emit(OpId::unsqueeze, {is_padding}, {{"axes", std::vector<int64_t>{id_rank}}},
                                                          name + ".is_padding_row"));
      CLEAVE_ASSIGN_OR_RETURN(ValueId constant, emit(OpId::detach, {local}, {}, name + ".constant"));
      CLEAVE_ASSIGN_OR_RETURN(local, emit(OpId::where, {padding_rows, constant, local}, {}, name + ".padded"));
    }
    ValueSharding out = replicatedLayout(y);
    for (size_t d = 0; d < ids_layout.dim_axis.size() && d < out.dim_axis.size(); ++d) out.dim_axis[d] = ids_layout.dim_axis[d];
    out.partial[tp_] = ValueSharding::Partial::kSum;
    if (localType(global_.values[y].type, out) != local_.values[local].type)
      return Status::internal(where(node) + "the vocabulary-parallel lookup is " + local_.values[local].type.str());
    bind(y, local, std::move(out));
    return Status::ok();
  }

  // A softmax cross-entropy whose logits arrive split over tp along the classes (a column-split
  // LM head), with the labels laid out as the logits' leading dims.
  bool isVocabParallelCrossEntropy(const Node& node) const {
    if (node.op != OpId::softmax_cross_entropy || tp_ == kNoAxis || mesh_.tp() == 1) return false;
    const ValueSharding& logits = sharding_of_[node.operands[0]];
    const ValueSharding& labels = sharding_of_[node.operands[1]];
    if (logits.dim_axis.empty() || logits.dim_axis.back() != tp_ || logits.isPartial() || labels.isPartial()) return false;
    for (size_t d = 0; d + 1 < logits.dim_axis.size(); ++d)
      if (d >= labels.dim_axis.size() || logits.dim_axis[d] != labels.dim_axis[d]) return false;
    return true;
  }

  // Megatron's vocabulary-parallel cross-entropy: no rank gathers the logits. Each rank takes its
  // classes' share of the row maximum, of the sum of exponentials and of the label's logit, and three
  // all-reduces over tp combine them; the mean over the positions whose label is not ignore_index
  // is then the same on every tp rank (and a partial mean over dp, as the op's own rule gives).
  Status partitionVocabParallelCrossEntropy(const Node& node) {
    const ValueId logits_g = node.operands[0], labels_g = node.operands[1], loss_g = node.results[0];
    const ValueId logits = local_of_[logits_g], labels = local_of_[labels_g];
    const TensorType type = local_.values[logits].type;  // a copy: emitting nodes grows local_.values
    const int64_t rank = type.rank(), classes = type.shape.back();
    const std::string& name = global_.values[loss_g].name;
    const std::string float_name(dtypeName(type.dtype));
    const AttrMap last_dim{{"axes", std::vector<int64_t>{rank - 1}}};
    auto reduce = [&](ValueId v, const std::string& op, const std::string& suffix) {
      AttrMap attrs = groupAttrs(tp_);
      attrs.emplace("reduce", op);
      return emit(OpId::all_reduce, {v}, std::move(attrs), name + suffix);
    };
    // 1. The row maximum over every rank's classes, kept out of the gradient (it passes through
    //    integers): any shift leaves the loss as it is, and this one keeps exp finite.
    AttrMap keep = last_dim;
    keep.emplace("keepdims", int64_t{1});
    CLEAVE_ASSIGN_OR_RETURN(ValueId max_local, emit(OpId::reduce_max, {logits}, keep, name + ".max_local"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId max_int, emit(OpId::cast, {max_local}, {{"to", std::string("i32")}}, name + ".max_int"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId shift_local, emit(OpId::cast, {max_int}, {{"to", float_name}}, name + ".shift_local"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId shift, reduce(shift_local, "max", ".shift"));
    // 2. log(sum of exp) over every rank's classes.
    CLEAVE_ASSIGN_OR_RETURN(ValueId shifted, emit(OpId::sub, {logits, shift}, {}, name + ".shifted"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId exps, emit(OpId::exp, {shifted}, {}, name + ".exp"));
    AttrMap drop = last_dim;
    drop.emplace("keepdims", int64_t{0});
    CLEAVE_ASSIGN_OR_RETURN(ValueId sum_local, emit(OpId::reduce_sum, {exps}, drop, name + ".sum_local"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId sum, reduce(sum_local, "sum", ".sum"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId log_sum, emit(OpId::log, {sum}, {}, name + ".log_sum"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId shift_row, emit(OpId::squeeze, {shift}, last_dim, name + ".shift_row"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId log_sum_exp, emit(OpId::add, {log_sum, shift_row}, {}, name + ".logsumexp"));
    // 3. The label's logit, from the rank whose classes hold it.
    CLEAVE_ASSIGN_OR_RETURN(LocalRows label, localRows(labels, classes, name + ".label"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId index, emit(OpId::unsqueeze, {label.index}, last_dim, name + ".label_index"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId picked, emit(OpId::gather_elements, {logits, index}, {{"axis", rank - 1}},
                                                  name + ".picked"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId picked_row, emit(OpId::squeeze, {picked}, last_dim, name + ".picked_row"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId here, emit(OpId::cast, {label.here}, {{"to", float_name}}, name + ".label_here"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId label_local, emit(OpId::mul, {picked_row, here}, {}, name + ".label_local"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId label_logit, reduce(label_local, "sum", ".label_logit"));
    // 4. The mean of logsumexp - label logit over the positions whose label is not ignore_index.
    const int64_t ignore_index = OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("ignore_index");
    const DType label_type = local_.values[labels].type.dtype;
    CLEAVE_ASSIGN_OR_RETURN(ValueId ignored_label, scalarConstant(label_type, static_cast<double>(ignore_index), name + ".ignore_index"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId ignored, emit(OpId::equal, {labels, ignored_label}, {}, name + ".ignored"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId ignored_f, emit(OpId::cast, {ignored}, {{"to", float_name}}, name + ".ignored_f"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId one, scalarConstant(type.dtype, 1, name + ".one"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId counted, emit(OpId::sub, {one, ignored_f}, {}, name + ".counted"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId per_position, emit(OpId::sub, {log_sum_exp, label_logit}, {}, name + ".per_position"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId kept, emit(OpId::mul, {per_position, counted}, {}, name + ".kept"));
    const AttrMap all{{"keepdims", int64_t{0}}};
    CLEAVE_ASSIGN_OR_RETURN(ValueId total, emit(OpId::reduce_sum, {kept}, all, name + ".total"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId count, emit(OpId::reduce_sum, {counted}, all, name + ".count"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId mean, emit(OpId::div, {total, count}, {}, name + ".local"));
    const DType loss_type = global_.values[loss_g].type.dtype;
    if (type.dtype != loss_type) {
      CLEAVE_ASSIGN_OR_RETURN(mean, emit(OpId::cast, {mean}, {{"to", std::string(dtypeName(loss_type))}}, name + ".cast"));
    }
    ValueSharding out = replicatedLayout(loss_g);
    for (size_t d = 0; d + 1 < sharding_of_[logits_g].dim_axis.size(); ++d) {
      const int8_t axis = sharding_of_[logits_g].dim_axis[d];
      if (axis != kNoAxis) out.partial[axis] = ValueSharding::Partial::kMean;
    }
    bind(loss_g, mean, std::move(out));
    return Status::ok();
  }

  // A gemm adding c whose a arrives split over tp along k (GPT-2's Conv1D after a column split):
  // the row split of Megatron, which partitionByRule's rule would refuse (c does not carry k).
  bool isRowSplitGemmWithC(const Node& node) const {
    if (node.op != OpId::gemm || node.operands.size() != 3 || tp_ == kNoAxis || mesh_.tp() == 1) return false;
    OpContext attrs{opDef(node.op), {}, {}, node.attrs};
    if (attrs.getFloat("beta") != 1.0 || isPendingParam(node.operands[0])) return false;
    const int k_dim = attrs.getInt("transpose_a") == 1 ? 0 : 1;
    return sharding_of_[node.operands[0]].dim_axis[k_dim] == tp_;
  }

  // y = gemm(a, b, c) as y = add(gemm(a, b), c): the product is a partial sum over tp, all-reduced
  // before c is added once.
  Status partitionRowSplitGemm(const Node& node) {
    Node product = node;
    product.operands.pop_back();
    CLEAVE_TRY(partitionByRule(product));
    Node bias{OpId::add, {node.results[0], node.operands[2]}, {node.results[0]}, {}, node.loc};
    return partitionNode(bias);
  }

  // Sources without operands: the same on every device.
  Status copyReplicated(const Node& node) {
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (ValueId r : node.results) {
      types.push_back(global_.values[r].type);
      names.push_back(global_.values[r].name);
    }
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            local_.addNodeWithTypes(node.op, {}, node.attrs, node.loc, names, types));
    for (size_t i = 0; i < results.size(); ++i) bind(node.results[i], results[i], replicatedLayout(node.results[i]));
    return Status::ok();
  }

  // Pipeline boundaries carry batch rows split over dp, whole otherwise.
  Status partitionRecv(const Node& node) {
    ValueId r = node.results[0];
    ValueSharding s = boundaryLayout(r);
    TensorType local_type = localType(global_.values[r].type, s);
    AttrMap attrs = node.attrs;
    attrs["shape"] = local_type.shape;
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            local_.addNodeWithTypes(node.op, {}, std::move(attrs), node.loc, {global_.values[r].name}, {local_type}));
    bind(r, results[0], std::move(s));
    return Status::ok();
  }

  Status partitionSend(const Node& node) {
    ValueId v = node.operands[0];
    CLEAVE_ASSIGN_OR_RETURN(ValueId local, reshard(v, boundaryLayout(v)));
    return local_.addNodeWithTypes(node.op, {local}, node.attrs, node.loc, {}, {}).status();
  }

  // reshape, flatten, squeeze, unsqueeze: a split dim survives when it is the leading dim (of size
  // above 1) of a group of dims the reshape merges or splits, and the group's leading result dim
  // divides by the axis size; other splits are gathered first.
  Status partitionReshape(const Node& node) {
    ValueId x = node.operands[0], y = node.results[0];
    const Shape& in = global_.values[x].type.shape;
    const Shape& out = global_.values[y].type.shape;
    // Keep each split that sits on its group's leading dim; gather the others. A parameter first
    // used here (an imported model's BatchNorm scale, unsqueezed to broadcast) is replicated.
    if (isPendingParam(x)) CLEAVE_TRY(createParam(x, replicatedLayout(x)));
    ValueSharding in_target = sharding_of_[x];
    ValueSharding out_sharding = ValueSharding::replicated(out.size(), mesh_.numAxes());
    for (size_t d = 0; d < in.size(); ++d) {
      int8_t axis = in_target.dim_axis[d];
      if (axis == kNoAxis) continue;
      const int lands = reshapedSplitDim(in, out, d, axisSize(axis));
      if (lands >= 0) {
        out_sharding.dim_axis[static_cast<size_t>(lands)] = axis;
      } else {
        in_target.dim_axis[d] = kNoAxis;
      }
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId local_x, reshard(x, in_target));
    TensorType local_out = localType(global_.values[y].type, out_sharding);
    AttrMap attrs = node.attrs;
    const OpDef& def = opDef(node.op);
    if (!def.result_shape_attr.empty()) attrs[std::string(def.result_shape_attr)] = local_out.shape;
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            local_.addNode(node.op, {local_x}, std::move(attrs), node.loc, {global_.values[y].name}));
    if (local_.values[results[0]].type != local_out)
      return Status::internal(where(node) + "the local result is " + local_.values[results[0]].type.str() + ", expected " +
                              local_out.str());
    bind(y, results[0], std::move(out_sharding));
    return Status::ok();
  }

  // Every other op: factors from its sharding rule.
  Status partitionByRule(const Node& node) {
    const OpDef& def = opDef(node.op);
    std::vector<TensorType> operand_types, result_types;
    for (ValueId v : node.operands) operand_types.push_back(global_.values[v].type);
    for (ValueId v : node.results) result_types.push_back(global_.values[v].type);
    ShardingRule rule = def.sharding(OpContext{def, operand_types, result_types, node.attrs});
    if (rule.operand_dims.size() != node.operands.size())
      return Status::internal(where(node) + "the op's sharding rule does not describe its operands");
    std::vector<FactorKind> kinds = rule.factor_kinds;
    if (def.partial_reduction == PartialReduction::kNone)  // nothing to combine partial results with
      for (FactorKind& k : kinds)
        if (k == FactorKind::kReduction) k = FactorKind::kNeedReplication;

    // 1. Factors take the axes of the operands that already have a layout, first come first served.
    std::vector<int8_t> factor_axis(rule.numFactors(), kNoAxis);
    auto axisUsed = [&](int8_t axis) { return std::find(factor_axis.begin(), factor_axis.end(), axis) != factor_axis.end(); };
    // With sequence parallelism, a weight op about to split a weight that has no layout yet over
    // tp leaves its input's sequence split (dim 1) aside: the input is gathered along the sequence
    // and the weight takes Megatron's column split.
    const bool gathers_sequence = sequence_parallel_ && mesh_.tp() > 1 && opDef(node.op).weight_operand == 1 &&
                                  node.operands.size() >= 2 && isPendingParam(node.operands[1]);
    for (size_t o = 0; o < node.operands.size(); ++o) {
      ValueId v = node.operands[o];
      if (isPendingParam(v)) continue;
      const ValueSharding& s = sharding_of_[v];
      for (size_t d = 0; d < s.dim_axis.size(); ++d) {
        int8_t axis = s.dim_axis[d];
        if (gathers_sequence && axis == tp_ && d == 1 && s.dim_axis.size() >= 3) continue;
        int f = rule.operand_dims[o][d];
        if (axis == kNoAxis || f == ShardingRule::kNoFactor || kinds[f] == FactorKind::kNeedReplication) continue;
        if (factor_axis[f] == kNoAxis && !axisUsed(axis) && rule.factor_sizes[f] % axisSize(axis) == 0) factor_axis[f] = axis;
      }
    }
    // 2. A split reduction factor with an operand that does not carry it (conv2d's bias) would add
    //    that operand on every device: keep such reductions whole.
    for (int f = 0; f < rule.numFactors(); ++f) {
      if (factor_axis[f] == kNoAxis || kinds[f] != FactorKind::kReduction) continue;
      for (const auto& dims : rule.operand_dims)
        if (!dims.empty() && std::find(dims.begin(), dims.end(), f) == dims.end()) factor_axis[f] = kNoAxis;
    }
    // 3. Megatron's column split: a weight op whose weight has no layout yet and no factor over tp.
    if (mesh_.tp() > 1 && opDef(node.op).weight_operand == 1 && node.operands.size() >= 2 && isPendingParam(node.operands[1]) &&
        !axisUsed(tp_))
      chooseColumnSplit(node, rule, kinds, factor_axis);

    // 4. Operands take the chosen layout: parameters are created in it; other values are resharded,
    //    and marked for a gradient sum over each axis they are replicated over but the op splits.
    std::vector<ValueId> local_operands;
    for (size_t o = 0; o < node.operands.size(); ++o) {
      ValueId v = node.operands[o];
      ValueSharding target = replicatedLayout(v);
      for (size_t d = 0; d < target.dim_axis.size(); ++d) {
        int f = rule.operand_dims[o][d];
        if (f != ShardingRule::kNoFactor) target.dim_axis[d] = factor_axis[f];
      }
      if (isPendingParam(v)) {
        ValueSharding param_layout = target;
        for (int8_t& a : param_layout.dim_axis)
          if (a == dp_) a = kNoAxis;  // weights are never split over dp
        CLEAVE_TRY(createParam(v, std::move(param_layout)));
      }
      // A value the op splits over an axis it is replicated over has its gradient summed over the
      // axis: by grad_all_reduce (Megatron's "f"), or, for a value gathered over the axis here (a
      // sequence split meeting a column split), by the gather's gradient, a reduce-scatter.
      const ValueSharding before = sharding_of_[v];
      const bool sums_gathered_gradient = carries_gradient_[v] && tp_ != kNoAxis && axisUsed(tp_) &&
                                          target.replicatedOver(tp_) && !before.replicatedOver(tp_);
      CLEAVE_ASSIGN_OR_RETURN(ValueId local, reshard(v, target, sums_gathered_gradient));
      if (carries_gradient_[v])
        for (int8_t axis : {dp_, tp_})
          if (axis != kNoAxis && axisUsed(axis) && target.replicatedOver(axis) && before.replicatedOver(axis)) {
            CLEAVE_ASSIGN_OR_RETURN(local, gradientSync(v, local, axis));
          }
      local_operands.push_back(local);
    }

    // 5. The local node; attributes that spell out shapes take the local shapes.
    std::vector<ValueSharding> result_shardings;
    for (size_t r = 0; r < node.results.size(); ++r) {
      ValueSharding s = replicatedLayout(node.results[r]);
      for (size_t d = 0; d < s.dim_axis.size(); ++d) {
        int f = rule.result_dims[r][d];
        if (f != ShardingRule::kNoFactor) s.dim_axis[d] = factor_axis[f];
      }
      for (int f = 0; f < rule.numFactors(); ++f)
        if (factor_axis[f] != kNoAxis && kinds[f] == FactorKind::kReduction)
          s.partial[factor_axis[f]] = def.partial_reduction == PartialReduction::kMean ? ValueSharding::Partial::kMean
                                                                                      : ValueSharding::Partial::kSum;
      result_shardings.push_back(std::move(s));
    }
    AttrMap attrs = node.attrs;
    if (!def.result_shape_attr.empty())
      attrs[std::string(def.result_shape_attr)] = localType(global_.values[node.results[0]].type, result_shardings[0]).shape;
    std::vector<std::string> names;
    for (ValueId r : node.results) names.push_back(global_.values[r].name);
    auto results = local_.addNode(node.op, local_operands, std::move(attrs), node.loc, names);
    if (!results) return Status::internal(where(node) + "the local node is invalid: " + results.status().message());
    for (size_t r = 0; r < node.results.size(); ++r) {
      TensorType expected = localType(global_.values[node.results[r]].type, result_shardings[r]);
      if (local_.values[(*results)[r]].type != expected)
        return Status::internal(where(node) + "the local result is " + local_.values[(*results)[r]].type.str() +
                                ", expected " + expected.str());
      bind(node.results[r], (*results)[r], std::move(result_shardings[r]));
    }
    return Status::ok();
  }

  // Splits the weight's output-feature factor over tp: a pass-through factor of the weight that
  // reaches the result and no operand with a layout (a bias without one follows the weight), divisible by tp.
  void chooseColumnSplit(const Node& node, const ShardingRule& rule, const std::vector<FactorKind>& kinds,
                         std::vector<int8_t>& factor_axis) {
    // A batched product's weight [parts, in, out] (a fused projection's parts, fused_projections.h)
    // splits its output features, not its batch of parts; one held grouped ([groups, in, out / groups]:
    // parts of unequal sizes, ir/held_layout.h) splits its groups.
    const bool batched_weight = (node.op == OpId::matmul || node.op == OpId::fused_matmul) &&
                                rule.operand_dims[1].size() > 2;
    const Param* weight = global_.findParam(node.operands[1]);
    const bool grouped = batched_weight && weight && weight->model.grouped();
    for (size_t d = 0; d < rule.operand_dims[1].size(); ++d) {
      const int f = rule.operand_dims[1][d];
      if (grouped ? d != 0 : batched_weight && d + 2 < rule.operand_dims[1].size()) continue;
      if (f == ShardingRule::kNoFactor || kinds[f] != FactorKind::kPassThrough || factor_axis[f] != kNoAxis) continue;
      if (rule.factor_sizes[f] % mesh_.tp() != 0) continue;
      bool in_result = std::find(rule.result_dims[0].begin(), rule.result_dims[0].end(), f) != rule.result_dims[0].end();
      bool in_other = false;
      for (size_t o = 0; o < rule.operand_dims.size(); ++o)
        if (o != 1 && !isPendingParam(node.operands[o]) &&
            std::find(rule.operand_dims[o].begin(), rule.operand_dims[o].end(), f) != rule.operand_dims[o].end())
          in_other = true;
      if (in_result && !in_other) {
        if (gatheredBeforeUse(node, rule, f)) {
          declined_.insert(weightBehindViews(node.operands[1]));
          return;
        }
        factor_axis[f] = tp_;
        return;
      }
    }
  }

  // Whether a column split (factor f of `node`'s weight op split over tp) would be gathered before
  // any op uses it split: followed through the readers that pass it through (elementwise ops, views,
  // attention's products over heads), it meets one that needs it whole (a norm over the features,
  // BERT's MLM head and a ViT's patch embedding before their layer norms; a reshape into heads that do
  // not divide by tp, grouped-query attention's key/value heads) and no weight op reading it as
  // its input features (Megatron's row split) or a vocabulary-parallel loss. Such a weight stays whole:
  // every rank computes the layer, and nothing is gathered.
  bool gatheredBeforeUse(const Node& node, const ShardingRule& rule, int f) const {
    std::vector<std::pair<ValueId, size_t>> pending;  // (value, its dim the split is on)
    for (size_t d = 0; d < rule.result_dims[0].size(); ++d)
      if (rule.result_dims[0][d] == f) pending.emplace_back(node.results[0], d);
    std::set<std::pair<ValueId, size_t>> seen;
    for (int visits = 0; !pending.empty() && visits < 256; ++visits) {
      const auto [v, d] = pending.back();
      pending.pop_back();
      if (!seen.insert({v, d}).second) continue;
      for (int32_t u : users_[v]) {
        const Node& user = global_.nodes[u];
        const OpDef& def = opDef(user.op);
        if (user.op == OpId::softmax_cross_entropy && user.operands[0] == v &&
            d + 1 == global_.values[v].type.shape.size())
          continue;  // the vocabulary-parallel cross-entropy
        if (def.reshape_like && user.operands.size() == 1) {
          // As partitionReshape decides: a split the reshape cannot carry is gathered (grouped-query
          // attention's 2 key/value heads over tp 4).
          const int out = reshapedSplitDim(global_.values[v].type.shape, global_.values[user.results[0]].type.shape, d,
                                           mesh_.tp());
          if (out < 0) return true;
          pending.emplace_back(user.results[0], static_cast<size_t>(out));
          continue;
        }
        if (!def.sharding) continue;
        std::vector<TensorType> operand_types, result_types;
        for (ValueId o : user.operands) operand_types.push_back(global_.values[o].type);
        for (ValueId r : user.results) result_types.push_back(global_.values[r].type);
        const ShardingRule used = def.sharding(OpContext{def, operand_types, result_types, user.attrs});
        for (size_t o = 0; o < user.operands.size() && o < used.operand_dims.size(); ++o) {
          if (user.operands[o] != v || d >= used.operand_dims[o].size()) continue;
          const int g = used.operand_dims[o][d];
          if (g == ShardingRule::kNoFactor) continue;
          FactorKind kind = used.factor_kinds[g];
          if (kind == FactorKind::kReduction && def.partial_reduction == PartialReduction::kNone)
            kind = FactorKind::kNeedReplication;
          if (kind == FactorKind::kNeedReplication) return true;
          if (kind != FactorKind::kPassThrough) continue;  // a reduction: a partial sum, not a gather
          for (size_t r = 0; r < user.results.size() && r < used.result_dims.size(); ++r)
            for (size_t k = 0; k < used.result_dims[r].size(); ++k)
              if (used.result_dims[r][k] == g) pending.emplace_back(user.results[r], k);
        }
      }
    }
    return false;
  }

  // The parameter behind views of it (transposes, reshapes), or `v`.
  ValueId weightBehindViews(ValueId v) const {
    while (global_.values[v].producer >= 0) {
      const Node& producer = global_.nodes[global_.values[v].producer];
      if (producer.operands.size() != 1 || (producer.op != OpId::transpose && !opDef(producer.op).reshape_like)) break;
      v = producer.operands[0];
    }
    return v;
  }

  // Outputs are whole, except the batch rows of batch outputs, which stay split over dp.
  Status partitionOutputs() {
    for (ValueId v : global_.outputs) {
      CLEAVE_TRY(resolvePartial(v));
      ValueSharding target = replicatedLayout(v);
      bool rows_split = dp_ != kNoAxis && !target.dim_axis.empty() && sharding_of_[v].dim_axis[0] == dp_;
      if (rows_split) target.dim_axis[0] = dp_;
      CLEAVE_ASSIGN_OR_RETURN(ValueId local, reshard(v, target));
      const std::string& name = global_.values[v].name;
      if (local_.values[local].name != name) {
        CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> named, local_.addNode(OpId::identity, {local}, {}, {}, {}));
        local = named[0];
        ValueId taken = local_.findValue(name);
        if (taken != kNoValue) CLEAVE_TRY(local_.renameValue(taken, local_.uniqueName(name + ".local")));
        CLEAVE_TRY(local_.renameValue(local, name));
      }
      local_.outputs.push_back(local);
    }
    return Status::ok();
  }

  const std::set<std::string>& whole_;  // parameters kept whole
  const bool sequence_parallel_;        // partial sums over tp of [batch, sequence, ...] reduce-scatter along the sequence
  int sequence_splits_ = 0;             // how many did
  const Graph& global_;
  const DeviceMesh& mesh_;
  const MeshCoord coord_;
  const int8_t dp_;  // the mesh's data axis (kNoAxis when it has none)
  const int8_t tp_;  // the mesh's tensor axis (kNoAxis when it has none)
  Graph local_;
  std::vector<ValueId> local_of_;             // global value -> its local value (in sharding_of_)
  std::vector<ValueSharding> sharding_of_;    // global value -> layout of local_of_
  std::vector<bool> carries_gradient_;        // global value depends on a trainable parameter
  std::vector<bool> batch_dependent_;         // global value depends on an input or a recv
  std::map<std::pair<ValueId, std::string>, ValueId> reshard_cache_;
  std::map<std::pair<ValueId, int8_t>, ValueId> sync_cache_;
  std::map<ValueId, int32_t> pending_views_;  // view of a parameter -> its node, while the parameter has no layout
  std::map<ValueId, ValueId> held_as_;        // parameter -> the reshape of it the local graph holds (isHeldReshape)
  std::vector<int> use_count_;                // global value -> nodes reading it, plus outputs and state updates
  const std::vector<std::vector<int32_t>> users_;  // global value -> the nodes reading it
  std::set<ValueId> declined_;                // weights kept whole: their column split would be gathered (gatheredBeforeUse)
};

}  // namespace

Expected<Graph> partitionForDevice(const Graph& global, const DeviceMesh& mesh, MeshCoord coord,
                                   TensorParallelReport* report, const std::set<std::string>& whole,
                                   bool sequence_parallel) {
  return DevicePartitioner(global, mesh, coord, whole, sequence_parallel).run(report);
}

}  // namespace cleave
