// Microbatching: clones a stage graph's per-microbatch nodes M times and combines their outputs.
#include "passes/partition/microbatching.h"

#include <map>
#include <string>
#include <vector>

#include "ir/gradient.h"
#include "passes/training/autodiff.h"

namespace cleave {

int64_t microbatchTag(int64_t transfer_tag, int microbatch, int num_microbatches) {
  return 2 * (transfer_tag * num_microbatches + microbatch);
}

int64_t gradientTag(int64_t forward_tag) { return forward_tag + 1; }

int tagMicrobatch(int64_t tag, int num_microbatches) { return static_cast<int>((tag / 2) % num_microbatches); }

int64_t tagTransfer(int64_t tag, int num_microbatches) { return tag / 2 / num_microbatches; }

bool isGradientTag(int64_t tag) { return tag % 2 == 1; }

namespace {

// Builds the unrolled graph from the microbatch graph `source`.
class Unroller {
 public:
  Unroller(const Graph& source, int num_microbatches)
      : source_(source),
        num_microbatches_(num_microbatches),
        per_microbatch_(source.values.size(), false),
        shared_(source.values.size(), kNoValue),
        clones_(num_microbatches, std::vector<ValueId>(source.values.size(), kNoValue)) {}

  Expected<Graph> run() {
    target_.name = source_.name;
    // 1. Inputs grow M times along dim 0; parameters are shared as they are.
    for (ValueId input : source_.inputs) {
      const Value& value = source_.values[input];
      if (value.type.rank() == 0)
        return Status::badInput("microbatching: input '%" + value.name +
                                "' has no batch dimension to split into microbatches");
      TensorType grown = value.type;
      grown.shape[0] *= num_microbatches_;
      CLEAVE_ASSIGN_OR_RETURN(shared_[input], target_.addInput(value.name, grown));
      per_microbatch_[input] = true;
    }
    for (const Param& param : source_.params) {
      const Value& value = source_.values[param.value];
      CLEAVE_ASSIGN_OR_RETURN(ValueId copy, target_.addParam(value.name, value.type, param.init, param.trainable));
      target_.params.back().full_shape = param.full_shape;
      target_.params.back().shard_offset = param.shard_offset;
      target_.params.back().shard_steps = param.shard_steps;
      target_.params.back().model = param.model;
      shared_[param.value] = copy;
    }
    // 2. Which nodes run per microbatch: those using an input, a receive, or such a node's result.
    std::vector<bool> cloned(source_.nodes.size(), false);
    for (size_t i = 0; i < source_.nodes.size(); ++i) {
      const Node& node = source_.nodes[i];
      bool depends = node.op == OpId::recv;
      for (ValueId v : node.operands) depends = depends || per_microbatch_[v];
      cloned[i] = depends;
      for (ValueId r : node.results) per_microbatch_[r] = depends;
    }
    // 3. Shared nodes once, first (they use only parameters, constants and each other).
    for (size_t i = 0; i < source_.nodes.size(); ++i)
      if (!cloned[i]) CLEAVE_TRY(copyNode(source_.nodes[i], -1));
    // 4. Each microbatch's rows of every input, then its clones of the per-microbatch nodes.
    for (int m = 0; m < num_microbatches_; ++m) {
      for (ValueId input : source_.inputs) CLEAVE_TRY(sliceInput(input, m));
      for (size_t i = 0; i < source_.nodes.size(); ++i)
        if (cloned[i]) CLEAVE_TRY(copyNode(source_.nodes[i], m));
    }
    // 5. Outputs combined over microbatches under their own names; state updates stay shared.
    for (ValueId output : source_.outputs) {
      CLEAVE_ASSIGN_OR_RETURN(ValueId combined, combineOutput(output));
      target_.outputs.push_back(combined);
    }
    for (const StateUpdate& update : source_.updates) {
      if (per_microbatch_[update.new_value] && num_microbatches_ > 1)
        return Status::badInput("microbatching: the state update of '%" + source_.values[update.target].name +
                                "' is computed per microbatch ('%" + source_.values[update.new_value].name +
                                "'), so microbatches cannot share it (train with one microbatch)");
      target_.updates.push_back({shared_[update.target], mapped(update.new_value, 0)});
    }
    return std::move(target_);
  }

 private:
  // The value standing for source value `v` in microbatch `m` (m = -1: the shared copy).
  ValueId mapped(ValueId v, int m) const { return m >= 0 && per_microbatch_[v] ? clones_[m][v] : shared_[v]; }

  // Rows [m·b, (m+1)·b) of input `input`, as the value microbatch m's clones read.
  Status sliceInput(ValueId input, int m) {
    const Value& value = source_.values[input];
    const int64_t rows = value.type.shape[0];
    AttrMap attrs = {{"starts", std::vector<int64_t>{m * rows}},
                     {"ends", std::vector<int64_t>{(m + 1) * rows}},
                     {"axes", std::vector<int64_t>{0}}};
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> rows_of_m,
                            target_.addNodeWithTypes(OpId::slice, {shared_[input]}, std::move(attrs), {},
                                                     {target_.uniqueName(cloneName(value.name, m))}, {value.type}));
    clones_[m][input] = rows_of_m[0];
    return Status::ok();
  }

  static std::string cloneName(const std::string& name, int m) { return name + ".mb" + std::to_string(m); }

  // Copies `node` for microbatch `m` (-1: shared), renaming clone results and re-tagging messages.
  Status copyNode(const Node& node, int m) {
    std::vector<ValueId> operands;
    for (ValueId v : node.operands) operands.push_back(mapped(v, m));
    AttrMap attrs = node.attrs;
    if (node.op == OpId::send || node.op == OpId::recv) {
      auto tag = attrs.find("tag");
      const int64_t* transfer_tag = tag == attrs.end() ? nullptr : std::get_if<int64_t>(&tag->second);
      if (!transfer_tag || m < 0)
        return Status::internal(nodeContext(source_, node) + "a pipeline message without a tag or outside every microbatch");
      tag->second = microbatchTag(*transfer_tag, m, num_microbatches_);
    }
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (ValueId r : node.results) {
      const Value& result = source_.values[r];
      names.push_back(m < 0 ? result.name : target_.uniqueName(cloneName(result.name, m)));
      types.push_back(result.type);
    }
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            target_.addNodeWithTypes(node.op, std::move(operands), std::move(attrs), node.loc,
                                                     std::move(names), std::move(types)));
    for (size_t k = 0; k < results.size(); ++k) (m < 0 ? shared_ : clones_[m])[node.results[k]] = results[k];
    return Status::ok();
  }

  // The output standing for `output` over all microbatches, named as `output`.
  Expected<ValueId> combineOutput(ValueId output) {
    const Value& value = source_.values[output];
    if (!per_microbatch_[output]) return shared_[output];
    const SourceLoc loc = value.producer >= 0 ? source_.nodes[value.producer].loc : SourceLoc{};
    ValueId combined = clones_[0][output];
    if (num_microbatches_ > 1 && isFloat(value.type.dtype) && value.type.rank() == 0) {
      // 1. A scalar mean per microbatch: the mean over microbatches is their sum over M.
      for (int m = 1; m < num_microbatches_; ++m) {
        CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> sum,
                                target_.addNode(OpId::add, {combined, clones_[m][output]}, {}, loc));
        combined = sum[0];
      }
      CLEAVE_ASSIGN_OR_RETURN(
          std::vector<ValueId> count,
          target_.addNode(OpId::constant, {}, {{"value", scalarTensor(num_microbatches_, value.type.dtype)}}, loc,
                          {value.name + ".microbatches"}));
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> mean, target_.addNode(OpId::div, {combined, count[0]}, {}, loc));
      combined = mean[0];
    } else if (num_microbatches_ > 1) {
      // 2. Anything else: the microbatches' rows one after another.
      if (value.type.rank() == 0)
        return Status::badInput("microbatching: output '%" + value.name +
                                "' is a non-float scalar computed per microbatch; it cannot be combined");
      std::vector<ValueId> parts;
      for (int m = 0; m < num_microbatches_; ++m) parts.push_back(clones_[m][output]);
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> rows,
                              target_.addNode(OpId::concat, std::move(parts), {{"axis", int64_t{0}}}, loc));
      combined = rows[0];
    }
    CLEAVE_TRY(target_.renameValue(combined, value.name));
    return combined;
  }

  const Graph& source_;
  const int num_microbatches_;
  Graph target_;
  std::vector<bool> per_microbatch_;           // per source value: computed once per microbatch
  std::vector<ValueId> shared_;                // per source value: its one copy in target_ (inputs: grown)
  std::vector<std::vector<ValueId>> clones_;   // per microbatch, per source value: its clone in target_
};

}  // namespace

Expected<Graph> unrollMicrobatches(const Graph& graph, int num_microbatches) {
  if (num_microbatches < 1)
    return Status::usage("microbatching: the number of microbatches must be at least 1, got " +
                         std::to_string(num_microbatches));
  return Unroller(graph, num_microbatches).run();
}

Status sumMicrobatchGradientsFromZeros(Graph& graph) {
  // 1. Per gradient, the first add of its chain gets add(zeros, g0) as operand 0; the new nodes are
  //    appended, and remembered to go right after g0's producer.
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  std::map<size_t, std::vector<Node>> before;  // node index -> nodes to insert before it
  const size_t original = graph.nodes.size();
  for (const Param& param : std::vector<Param>(graph.params)) {
    ValueId grad = graph.findValue(gradientName(graph.values[param.value].name));
    if (!param.trainable || grad == kNoValue) continue;
    int32_t n = graph.values[grad].producer;
    if (n < 0 || graph.nodes[n].op != OpId::add) continue;  // one microbatch's gradient alone
    const TensorType type = graph.values[grad].type;
    for (;;) {
      ValueId sum = graph.nodes[n].operands[0];
      int32_t p = graph.values[sum].producer;
      if (p < 0 || graph.nodes[p].op != OpId::add || users[sum].size() != 1 || graph.values[sum].type != type) break;
      n = p;
    }
    const ValueId first = graph.nodes[n].operands[0];
    if (graph.values[first].type != type) continue;  // a broadcast part: left as it is
    const std::string name = graph.values[grad].name;
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> zero, graph.addNode(OpId::constant, {}, {{"value", scalarTensor(0.0, type.dtype)}},
                                                                     {}, {graph.uniqueName(name + ".zero")}));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> zeros, graph.addNode(OpId::expand, {zero[0]}, {{"shape", type.shape}}, {},
                                                                      {graph.uniqueName(name + ".zeros")}));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> start, graph.addNode(OpId::add, {zeros[0], first}, {}, {},
                                                                      {graph.uniqueName(name + ".mb0")}));
    graph.nodes[n].operands[0] = start[0];
    // Right after g0 is computed (the sum then takes it at once and g0 is freed).
    const int32_t first_producer = graph.values[first].producer;
    const size_t at = first_producer >= 0 ? static_cast<size_t>(first_producer) + 1 : static_cast<size_t>(n);
    for (size_t k = graph.nodes.size() - 3; k < graph.nodes.size(); ++k) before[at].push_back(std::move(graph.nodes[k]));
    graph.nodes.resize(graph.nodes.size() - 3);
  }
  if (before.empty()) return Status::ok();
  // 2. The new nodes in place, then ids renumbered.
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + 3 * before.size());
  for (size_t i = 0; i < original; ++i) {
    auto it = before.find(i);
    if (it != before.end())
      for (Node& node : it->second) nodes.push_back(std::move(node));
    nodes.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(nodes);
  graph.compact();
  return Status::ok();
}

}  // namespace cleave
