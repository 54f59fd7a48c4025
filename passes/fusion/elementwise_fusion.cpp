// Elementwise fusion: groups chains of fusable nodes and rewrites each group as one fused node.
#include "passes/fusion/elementwise_fusion.h"

#include <algorithm>
#include <optional>

#include "ir/constant_eval.h"
#include "ir/ops/fused_body.h"

namespace cleave {
namespace {

// A group of nodes becoming one fused node: its members in program order.
struct FusionGroup {
  std::vector<int32_t> members;
  Shape shape;
  DType dtype;
  int64_t label;
  bool closed = false;   // ended by a step along the last axis (softmax, layer norm): nothing joins after it
  bool summing = false;  // has a column sum: only further column sums join
};

class ElementwiseFusion {
 public:
  ElementwiseFusion(Graph& graph, std::vector<int64_t>* node_group)
      : graph_(graph), node_group_(node_group), users_(graph.computeUsers()), group_of_(graph.nodes.size(), -1),
        is_root_(graph.valuesReadAfterNodes()) {}

  Expected<FusionReport> run() {
    // 1. Grow groups in program order.
    for (int32_t i = 0; i < static_cast<int32_t>(graph_.nodes.size()); ++i) {
      if (const int g = columnSumGroup(i); g >= 0) {
        groups_[g].members.push_back(i);
        groups_[g].summing = true;
        group_of_[i] = g;
        continue;
      }
      if (const int g = totalSumGroup(i); g >= 0) {  // ends the group, its one result
        groups_[g].members.push_back(i);
        groups_[g].closed = groups_[g].summing = true;
        group_of_[i] = g;
        continue;
      }
      if (isLoneColumnSum(i)) {  // nothing that joins or is joined: a fused node of its own
        group_of_[i] = static_cast<int>(groups_.size());
        const Value& summed = graph_.values[graph_.nodes[i].operands[0]];
        groups_.push_back(FusionGroup{{i}, summed.type.shape, summed.type.dtype, labelOf(i), /*closed=*/true, /*summing=*/true});
        continue;
      }
      if (!isCandidate(i)) continue;
      const bool ends_chain = opDef(graph_.nodes[i].op).fusable_along_last_axis;
      const int target = ends_chain ? groupOfOperand(i, 0) : groupToJoin(i);
      if (target >= 0 && !groups_[target].closed && !groups_[target].summing && canJoin(target, i)) {
        groups_[target].members.push_back(i);
        groups_[target].closed = ends_chain;
        group_of_[i] = target;
        continue;
      }
      // A softmax or a layer or RMS norm alone keeps its own kernel; a row gradient alone becomes a
      // fused node (its generated code beats the generic kernel; see isRowGradient).
      if (ends_chain && !isRowGradient(i)) continue;
      const Value& result = graph_.values[graph_.nodes[i].results[0]];
      group_of_[i] = static_cast<int>(groups_.size());
      groups_.push_back(FusionGroup{{i}, result.type.shape, result.type.dtype, labelOf(i), ends_chain});
    }
    // 2. Rewrite each group of two or more as a fused node in its last member's place.
    FusionReport report;
    std::vector<bool> dead(graph_.nodes.size(), false);
    for (const FusionGroup& group : groups_) {
      if (group.members.size() < 2 && !isTranscendental(group.members[0]) && !isRowGradient(group.members[0]) &&
          !isLoneColumnSum(group.members[0]))
        continue;
      CLEAVE_ASSIGN_OR_RETURN(bool rewritten, rewrite(group, dead));
      if (!rewritten) continue;
      ++report.fused_nodes;
      report.nodes_replaced += static_cast<int>(group.members.size());
    }
    if (report.fused_nodes == 0) return report;
    // 3. Scalar constants that only the fused bodies read go too.
    std::vector<int> uses(graph_.values.size(), 0);
    for (size_t i = 0; i < graph_.nodes.size(); ++i)
      if (!dead[i])
        for (ValueId v : graph_.nodes[i].operands) ++uses[v];
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& node = graph_.nodes[i];
      if (node.op == OpId::constant && !dead[i] && !is_root_[node.results[0]] && uses[node.results[0]] == 0 &&
          scalarConstant(node.results[0]))
        dead[i] = true;
    }
    graph_.eraseNodes(dead, node_group_);
    return report;
  }

 private:
  int64_t labelOf(int32_t node) const { return node_group_ && !node_group_->empty() ? (*node_group_)[node] : 0; }

  // The value of a one-element f32 or bf16 constant (the dtypes bodies compute), which a body holds
  // as a literal.
  std::optional<double> scalarConstant(ValueId v) const {
    if (graph_.values[v].type.dtype == DType::kF64) return std::nullopt;
    return scalarConstantValue(graph_, v);
  }

  // A literal keeps the step's result type only when the constant adds no dims to it.
  bool isLiteral(const Node& node, size_t operand) const {
    const ValueId v = node.operands[operand];
    if (!scalarConstant(v)) return false;
    return graph_.values[v].type.rank() <= graph_.values[node.results[0]].type.rank() &&
           graph_.values[v].type.dtype == graph_.values[node.results[0]].type.dtype;
  }

  // A layer_norm_grad or rms_norm_grad (a row step with per-column results: dscale, and dbias).
  bool isRowGradient(int32_t i) const { return isRowGradientOp(graph_.nodes[i].op); }

  bool isCandidate(int32_t i) const {
    const Node& node = graph_.nodes[i];
    const OpDef& def = opDef(node.op);
    if (!isRowGradient(i) && node.results.size() != 1) return false;
    const TensorType& result = graph_.values[node.results[0]].type;
    if (def.fusable_along_last_axis) {  // softmax, a layer or RMS norm or its gradient along the last axis, in f32, ending a chain
      auto axis = node.attrs.find("axis");
      const int64_t a = axis == node.attrs.end() ? std::get<int64_t>(def.findAttr("axis")->default_value)
                                                 : std::get<int64_t>(axis->second);
      if (result.dtype != DType::kF32 || result.rank() == 0 || (a != -1 && a != result.rank() - 1)) return false;
      // The chain comes in as the first operand; the others (scale, bias) hold a value per column,
      // but a row gradient's x, a row as the chain's.
      const TensorType per_column{DType::kF32, {result.shape.back()}};
      for (size_t k = 1; k < node.operands.size(); ++k)
        if (graph_.values[node.operands[k]].type != (isRowGradient(i) && k == 1 ? result : per_column)) return false;
      return graph_.values[node.operands[0]].type == result;
    }
    if (!def.fusable) return false;
    if (result.dtype != DType::kF32 && result.dtype != DType::kBF16) return false;
    bool reads_a_tensor = false;
    for (size_t a = 0; a < node.operands.size(); ++a) {
      if (graph_.values[node.operands[a]].type.dtype != result.dtype) return false;
      if (!isLiteral(node, a)) reads_a_tensor = true;
    }
    return reads_a_tensor;  // all literals: constant folding's work
  }

  int groupOfOperand(int32_t i, size_t k) const {
    const int32_t producer = graph_.values[graph_.nodes[i].operands[k]].producer;
    return producer >= 0 ? group_of_[producer] : -1;
  }

  // The group node i joins: the first group computing one of its operands that it may join; else
  // the last group made, when it reads one of node i's operands too (a sibling: GELU's x·0.5 and
  // x³ from one x become one fused node instead of a lone mul and a chain). -1 when none.
  int groupToJoin(int32_t i) const {
    const Node& node = graph_.nodes[i];
    for (size_t k = 0; k < node.operands.size(); ++k)
      if (const int g = groupOfOperand(i, k); g >= 0 && !groups_[g].closed && !groups_[g].summing && canJoin(g, i)) return g;
    if (groups_.empty() || groups_.back().closed || groups_.back().summing) return -1;
    const int last = static_cast<int>(groups_.size()) - 1;
    for (int32_t member : groups_.back().members)
      for (ValueId read : graph_.nodes[member].operands)
        for (size_t k = 0; k < node.operands.size(); ++k)
          if (read == node.operands[k] && !isLiteral(node, k) && canJoin(last, i)) return last;
    return -1;
  }

  // Node i may join `g` when it has the group's shape, dtype and label, follows the group's last
  // member with only views and constants between them, and no node outside the group that reads a
  // member's result comes before i (the fused node will stand at i). Adjacency keeps the fused
  // node from holding its operands longer than the nodes it replaces did (a chain over gradients of
  // several microbatches would keep them all alive to the end).
  bool canJoin(int g, int32_t i) const {
    const FusionGroup& group = groups_[g];
    const TensorType& result = graph_.values[graph_.nodes[i].results[0]].type;
    if (result.shape != group.shape || result.dtype != group.dtype || labelOf(i) != group.label) return false;
    if (opDef(graph_.nodes[i].op).fusable_along_last_axis)
      for (size_t k = 1; k < graph_.nodes[i].operands.size(); ++k)
        if (groupOfOperand(i, k) == g) return false;  // a per-column operand computed by the chain
    return standsAfter(g, i);
  }

  // Node i follows group g's last member with only views and constants between them, and no node
  // outside the group that reads a member's result comes before i.
  bool standsAfter(int g, int32_t i) const {
    const FusionGroup& group = groups_[g];
    for (int32_t between = group.members.back() + 1; between < i; ++between) {
      const Node& node = graph_.nodes[between];
      if (!opDef(node.op).view && node.op != OpId::constant) return false;
    }
    for (int32_t member : group.members)
      for (int32_t user : users_[graph_.nodes[member].results[0]])
        if (user != i && group_of_[user] != g && user < i) return false;
    return true;
  }

  // The group reduce_sum node i joins as a column sum (a bias gradient: its operand, a member of the
  // group, summed over every dim but the last into f32[columns]), or -1. It must follow the group's
  // last member (views and constants between), and the value it sums must be read outside the
  // group too, so that the fused node returns it (a GPU sums the returned tensor; see
  // ir/ops/fused_body.h).
  int columnSumGroup(int32_t i) const {
    const Node& node = graph_.nodes[i];
    if (node.op != OpId::reduce_sum || node.operands.size() != 1 || node.results.size() != 1) return -1;
    const int g = groupOfOperand(i, 0);
    if (g < 0 || groups_[g].closed || groups_[g].dtype != DType::kF32 || labelOf(i) != groups_[g].label) return -1;
    const FusionGroup& group = groups_[g];
    const ValueId summed = node.operands[0], result = node.results[0];
    if (graph_.values[summed].type.shape != group.shape ||
        !sumsColumns(node.attrs, graph_.values[summed].type, graph_.values[result].type))
      return -1;
    if (!is_root_[result] && users_[result].empty()) return -1;
    bool read_outside = is_root_[summed];
    for (int32_t user : users_[summed]) read_outside = read_outside || (user != i && group_of_[user] != g);
    if (!read_outside) return -1;
    return standsAfter(g, i) ? g : -1;
  }

  // The group reduce_sum node i joins as a total sum (gradient clipping's sum of squares: its
  // operand, a member of the group, summed over all dims into f32[]), or -1. No value of the group
  // but the sum may be read outside it: the fused node returns the sum alone, and its kernel never
  // writes the summands (the host adds each into a double per column as it computes it).
  int totalSumGroup(int32_t i) const {
    const Node& node = graph_.nodes[i];
    if (node.op != OpId::reduce_sum || node.operands.size() != 1 || node.results.size() != 1 ||
        !isTotalSum(FusedStep{node.op, {}, node.attrs}))
      return -1;
    const int g = groupOfOperand(i, 0);
    if (g < 0 || groups_[g].closed || groups_[g].summing || groups_[g].dtype != DType::kF32 || labelOf(i) != groups_[g].label)
      return -1;
    const ValueId summed = node.operands[0], result = node.results[0];
    if (graph_.values[summed].type.shape != groups_[g].shape || graph_.values[result].type != TensorType{DType::kF32, {}})
      return -1;
    if (!is_root_[result] && users_[result].empty()) return -1;
    for (int32_t member : groups_[g].members) {
      const ValueId v = graph_.nodes[member].results[0];
      if (is_root_[v]) return -1;
      for (int32_t user : users_[v])
        if (user != i && group_of_[user] != g) return -1;
    }
    return g;
  }

  // A column sum (a bias gradient) of a value no group computes: a fused node of its own, whose
  // generated code sums the rows about 3x faster than the generic reduce_sum kernel (a [512,256]
  // bias gradient: kernels_bench --elementwise).
  bool isLoneColumnSum(int32_t i) const {
    const Node& node = graph_.nodes[i];
    if (node.op != OpId::reduce_sum || node.operands.size() != 1 || node.results.size() != 1) return false;
    return sumsColumns(node.attrs, graph_.values[node.operands[0]].type, graph_.values[node.results[0]].type);
  }

  // A lone node of a transcendental op (its cost counts at least 8 FLOPs per element) still becomes
  // a fused node: the generated code, vectorised for the host CPU, beats the generic kernel.
  bool isTranscendental(int32_t i) const {
    const Node& node = graph_.nodes[i];
    std::vector<TensorType> operands, results;
    for (ValueId v : node.operands) operands.push_back(graph_.values[v].type);
    for (ValueId v : node.results) results.push_back(graph_.values[v].type);
    const OpDef& def = opDef(node.op);
    const double elements = static_cast<double>(results[0].numel());
    return elements > 0 && def.cost(OpContext{def, operands, results, node.attrs}).flops >= 8 * elements;
  }

  bool usedOutside(const FusionGroup& group, int g, int32_t member) const {
    const ValueId v = graph_.nodes[member].results[0];
    if (is_root_[v]) return true;
    for (int32_t user : users_[v])
      if (group_of_[user] != g) return true;
    return false;
  }

  // Rewrites `group` as one fused node; false (nothing changed) when no value of it is read.
  Expected<bool> rewrite(const FusionGroup& group, std::vector<bool>& dead) {
    const int g = group_of_[group.members[0]];
    FusedBody body;
    std::vector<ValueId> operands;
    std::vector<int> step_of(graph_.nodes.size(), -1);
    for (int32_t member : group.members) {
      const Node& node = graph_.nodes[member];
      FusedStep step{node.op, {}, node.attrs};
      for (size_t a = 0; a < node.operands.size(); ++a) {
        const ValueId v = node.operands[a];
        const int32_t producer = graph_.values[v].producer;
        if (producer >= 0 && group_of_[producer] == g) {
          step.args.push_back({FusedArg::Kind::kStep, step_of[producer], 0.0});
        } else if (isLiteral(node, a)) {
          step.args.push_back({FusedArg::Kind::kLiteral, 0, *scalarConstant(v)});
        } else {
          auto at = std::find(operands.begin(), operands.end(), v);
          if (at == operands.end()) at = operands.insert(operands.end(), v);
          step.args.push_back({FusedArg::Kind::kOperand, static_cast<int>(at - operands.begin()), 0.0});
        }
      }
      step_of[member] = static_cast<int>(body.steps.size());
      for (size_t k = 0; k < node.results.size(); ++k) {  // a step per result (a row gradient's two or three)
        body.steps.push_back(step);
        body.steps.back().result = static_cast<int>(k);
      }
    }
    std::vector<ValueId> results;
    for (int32_t member : group.members) {
      const std::vector<ValueId>& member_results = graph_.nodes[member].results;
      if (member_results.size() > 1) {  // a row gradient: every result, as the body returns per-column steps
        for (size_t k = 0; k < member_results.size(); ++k) {
          body.returned.push_back(step_of[member] + static_cast<int>(k));
          results.push_back(member_results[k]);
        }
        continue;
      }
      if (!usedOutside(group, g, member)) continue;
      body.returned.push_back(step_of[member]);
      results.push_back(member_results[0]);
    }
    if (results.empty()) return false;  // nothing reads the chain (dead code is dce's): left as it is
    Node& last = graph_.nodes[group.members.back()];
    Node fused{OpId::fused, operands, results, {{"body", printFusedBody(body)}}, last.loc};
    // The body must type as the nodes it replaces did (a build bug otherwise).
    std::vector<TensorType> operand_types;
    for (ValueId v : operands) operand_types.push_back(graph_.values[v].type);
    auto types = inferResultTypes(opDef(OpId::fused), operand_types, fused.attrs);
    if (!types) return Status::internal("fusion: " + nodeContext(graph_, last) + types.status().message());
    for (size_t r = 0; r < results.size(); ++r)
      if ((*types)[r] != graph_.values[results[r]].type)
        return Status::internal("fusion: " + nodeContext(graph_, last) + "fused result " + std::to_string(r) + " types as " +
                                (*types)[r].str() + ", the node it replaces gave " + graph_.values[results[r]].type.str());
    for (int32_t member : group.members) dead[member] = true;
    dead[group.members.back()] = false;
    last = std::move(fused);
    return true;
  }

  Graph& graph_;
  std::vector<int64_t>* node_group_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<int> group_of_;
  std::vector<bool> is_root_;
  std::vector<FusionGroup> groups_;
};

}  // namespace

Expected<FusionReport> fuseElementwise(Graph& graph, std::vector<int64_t>* node_group) {
  if (node_group && !node_group->empty() && node_group->size() != graph.nodes.size())
    return Status::internal("fusion: " + std::to_string(node_group->size()) + " node groups for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  return ElementwiseFusion(graph, node_group).run();
}

}  // namespace cleave
