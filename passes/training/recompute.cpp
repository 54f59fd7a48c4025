// Activation recomputation: which forward values are kept, and copies of forward work placed in
// the backward pass where it reads the others.
#include "passes/training/recompute.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace cleave {

Expected<RecomputeMode> parseRecomputeMode(std::string_view text) {
  if (text == "none") return RecomputeMode::kNone;
  if (text == "selective") return RecomputeMode::kSelective;
  if (text == "full") return RecomputeMode::kFull;
  return Status::usage("recompute: expected none, selective or full, got '" + std::string(text) + "'");
}

std::string_view recomputeModeName(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kNone: return "none";
    case RecomputeMode::kSelective: return "selective";
    case RecomputeMode::kFull: return "full";
  }
  return "none";
}

std::vector<bool> nodesComputing(const Graph& graph, const std::vector<ValueId>& roots) {
  std::vector<bool> needed(graph.values.size(), false), computing(graph.nodes.size(), false);
  for (ValueId v : roots) needed[v] = true;
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const Node& node = graph.nodes[i];
    for (ValueId r : node.results) computing[i] = computing[i] || needed[r];
    if (!computing[i]) continue;
    for (ValueId v : node.operands) needed[v] = true;
  }
  return computing;
}

namespace {

// A node whose work must not be done twice: a collective or a message (the other ranks would have
// to join), a random draw (it would draw other numbers), or one with side effects. Sequence
// parallelism's gather of a layer's tokens (all_gather with sum_gradient) is the exception, as in
// Megatron: the tp ranks, which run the same graph, all gather again at the same place, so each
// keeps 1/tp of those tokens rather than all of them.
bool mustNotRepeat(const Node& node) {
  const OpDef& def = opDef(node.op);
  if (node.op == OpId::all_gather) {
    auto sum_gradient = node.attrs.find("sum_gradient");
    if (sum_gradient != node.attrs.end() && std::get<int64_t>(sum_gradient->second) != 0) return false;
  }
  return def.isCommunication() || def.random || def.side_effects;
}

// A product with a weight: matmul, gemm or conv2d with an operand that does not depend on the
// data (a parameter, or a view or cast of one).
bool isWeightProduct(const Node& node, const std::vector<bool>& data) {
  if (node.op != OpId::matmul && node.op != OpId::gemm && node.op != OpId::conv2d) return false;
  return std::any_of(node.operands.begin(), node.operands.end(), [&](ValueId v) { return !data[v]; });
}

class Recomputation {
 public:
  Recomputation(Graph& graph, RecomputeMode mode, const std::vector<bool>& forward)
      : graph_(graph), mode_(mode), forward_(forward) {}

  Expected<RecomputeReport> run() {
    if (forward_.size() != graph_.nodes.size())
      return Status::internal("recompute: " + std::to_string(forward_.size()) + " forward flags for " +
                              std::to_string(graph_.nodes.size()) + " nodes");
    markDataAndForwardValues();
    markKeptValues();
    // Each backward node reads copies of the forward values that are not kept.
    const size_t original_nodes = graph_.nodes.size();
    copies_of_.assign(graph_.values.size(), kNoValue);
    std::vector<std::vector<int32_t>> copies_before(original_nodes);
    for (size_t i = 0; i < original_nodes; ++i) {
      if (forward_[i]) continue;
      const size_t copies_start = graph_.nodes.size();
      for (size_t o = 0; o < graph_.nodes[i].operands.size(); ++o) {
        const ValueId v = graph_.nodes[i].operands[o];
        if (!needsCopy(v)) continue;
        CLEAVE_ASSIGN_OR_RETURN(ValueId copy, copyOf(v));
        graph_.nodes[i].operands[o] = copy;
      }
      for (size_t c = copies_start; c < graph_.nodes.size(); ++c) copies_before[i].push_back(static_cast<int32_t>(c));
    }
    RecomputeReport report;
    report.copied_nodes = std::move(copied_);
    std::sort(report.copied_nodes.begin(), report.copied_nodes.end());
    if (report.copied_nodes.empty()) return report;
    // Program order: the copies a backward node needs just before it.
    std::vector<Node> ordered;
    ordered.reserve(graph_.nodes.size());
    for (size_t i = 0; i < original_nodes; ++i) {
      for (int32_t c : copies_before[i]) ordered.push_back(std::move(graph_.nodes[c]));
      ordered.push_back(std::move(graph_.nodes[i]));
    }
    graph_.nodes = std::move(ordered);
    graph_.compact();  // renumbers the producers
    return report;
  }

 private:
  // data_: depends on a graph input or on a collective or message (whose result is data too).
  // forward_value_: the result of a forward node.
  void markDataAndForwardValues() {
    data_.assign(graph_.values.size(), false);
    forward_value_.assign(graph_.values.size(), false);
    for (ValueId v : graph_.inputs) data_[v] = true;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& node = graph_.nodes[i];
      bool depends = opDef(node.op).isCommunication();
      for (ValueId v : node.operands) depends = depends || data_[v];
      for (ValueId r : node.results) {
        data_[r] = depends;
        forward_value_[r] = forward_[i];
      }
    }
  }

  // kept_: forward data values the backward pass reads as they are.
  void markKeptValues() {
    kept_.assign(graph_.values.size(), false);
    for (ValueId v : graph_.inputs) kept_[v] = true;
    // The forward nodes in order, and each data value's last forward reader among them.
    std::vector<int32_t> forward_nodes;
    std::vector<int64_t> position(graph_.values.size(), -1), last_read(graph_.values.size(), -1);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (!forward_[i]) continue;
      const int64_t at = static_cast<int64_t>(forward_nodes.size());
      forward_nodes.push_back(static_cast<int32_t>(i));
      const Node& node = graph_.nodes[i];
      for (ValueId v : node.operands)
        if (data_[v]) last_read[v] = at;
      for (ValueId r : node.results) position[r] = at;
      const bool keep = mustNotRepeat(node) || (mode_ == RecomputeMode::kSelective && isWeightProduct(node, data_));
      if (keep)
        for (ValueId r : node.results) kept_[r] = true;
    }
    // Layer boundaries: walking the forward pass, the points where one activation alone is still
    // to be read by later forward nodes. Values read across more than a quarter of the forward
    // pass are kept and not counted.
    const int64_t n = static_cast<int64_t>(forward_nodes.size());
    const int64_t long_span = std::max<int64_t>(n / 4, 16);
    std::vector<int64_t> ends_at(n + 1, 0);  // how many counted values are read last at each position
    int64_t live = 0;
    std::vector<ValueId> boundaries;
    std::vector<int64_t> boundary_positions;
    for (int64_t at = 0; at < n; ++at) {
      const Node& node = graph_.nodes[forward_nodes[at]];
      live -= ends_at[at];
      ValueId only = kNoValue;
      for (ValueId r : node.results) {
        if (!data_[r] || last_read[r] <= at) continue;
        if (last_read[r] - at > long_span) {
          kept_[r] = true;
          continue;
        }
        ++live;
        ++ends_at[last_read[r]];
        only = r;
      }
      if (live == 1 && only != kNoValue) {
        boundaries.push_back(only);
        boundary_positions.push_back(at);
      }
    }
    // Both modes keep a boundary at least every sqrt(n) forward nodes, so a segment's recomputed
    // activations and the kept boundaries both take O(sqrt(n)) memory, and no recomputed chain is
    // longer. Selective also keeps every boundary that joins two activations (a residual add).
    const int64_t spacing = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
    int64_t last_kept = -1;
    for (size_t b = 0; b < boundaries.size(); ++b) {
      const Node& producer = graph_.nodes[graph_.values[boundaries[b]].producer];
      std::set<ValueId> activations;  // distinct: mul(y, y) joins nothing
      for (ValueId v : producer.operands)
        if (data_[v]) activations.insert(v);
      const bool joins = activations.size() >= 2;
      const bool spaced = last_kept < 0 || boundary_positions[b] - last_kept >= spacing;
      if (!spaced && !(joins && mode_ == RecomputeMode::kSelective)) continue;
      kept_[boundaries[b]] = true;
      last_kept = boundary_positions[b];
    }
  }

  bool needsCopy(ValueId v) const { return data_[v] && forward_value_[v] && !kept_[v]; }

  // The copy of forward value `v`, made (with the copies it reads, operands first) when first
  // asked for. A worklist, not recursion: a chain to recompute may be as long as the forward pass.
  Expected<ValueId> copyOf(ValueId v) {
    std::vector<ValueId> pending = {v};
    while (!pending.empty()) {
      const ValueId top = pending.back();
      if (copies_of_[top] != kNoValue) {
        pending.pop_back();
        continue;
      }
      const int32_t producer = graph_.values[top].producer;
      bool operands_copied = true;
      for (ValueId operand : graph_.nodes[producer].operands)
        if (needsCopy(operand) && copies_of_[operand] == kNoValue) {
          pending.push_back(operand);
          operands_copied = false;
        }
      if (!operands_copied) continue;
      pending.pop_back();
      CLEAVE_TRY(copyNode(producer));
    }
    return copies_of_[v];
  }

  // Appends a copy of forward node `producer`, reading the copies of its operands that need one.
  Status copyNode(int32_t producer) {
    const Node node = graph_.nodes[producer];  // a copy: adding a node moves them
    std::vector<ValueId> operands;
    for (ValueId operand : node.operands) operands.push_back(needsCopy(operand) ? copies_of_[operand] : operand);
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (ValueId r : node.results) {
      names.push_back(graph_.uniqueName(graph_.values[r].name + ".recomputed"));
      types.push_back(graph_.values[r].type);
    }
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> copies,
                            graph_.addNodeWithTypes(node.op, std::move(operands), node.attrs, node.loc,
                                                    std::move(names), std::move(types)));
    copies_of_.resize(graph_.values.size(), kNoValue);
    data_.resize(graph_.values.size(), true);
    forward_value_.resize(graph_.values.size(), false);
    kept_.resize(graph_.values.size(), false);
    for (size_t r = 0; r < node.results.size(); ++r) copies_of_[node.results[r]] = copies[r];
    copied_.push_back(producer);
    return Status::ok();
  }

  Graph& graph_;
  const RecomputeMode mode_;
  const std::vector<bool>& forward_;
  std::vector<bool> data_, forward_value_, kept_;
  std::vector<ValueId> copies_of_;
  std::vector<int32_t> copied_;
};

}  // namespace

Expected<RecomputeReport> recomputeActivations(Graph& graph, RecomputeMode mode, const std::vector<bool>& forward) {
  if (mode == RecomputeMode::kNone) return RecomputeReport{};
  return Recomputation(graph, mode, forward).run();
}

}  // namespace cleave
