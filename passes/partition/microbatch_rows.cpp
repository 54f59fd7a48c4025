// Values computed across the batch rows, which microbatches would compute per microbatch
// (microbatch_rows.h).
#include "passes/partition/microbatch_rows.h"

#include <string>
#include <vector>

#include "ir/op_table.h"

namespace cleave {
namespace {

constexpr int kNoRows = -1;

// For a reshape-like op whose operand has the rows in dim `dim`: the result dim that has them, or
// kNoRows where the rows do not lead a group of dims the view merges or splits (row-major order:
// walk both shapes, closing a group where the element counts agree).
int rowsThroughView(const Shape& in, const Shape& out, int dim) {
  size_t i = 0, o = 0;
  while (i < in.size() && o < out.size()) {
    const size_t group_in = i, group_out = o;
    int64_t in_count = in[i++], out_count = out[o++];
    while (in_count != out_count) {
      if (in_count < out_count && i < in.size()) {
        in_count *= in[i++];
      } else if (out_count < in_count && o < out.size()) {
        out_count *= out[o++];
      } else {
        return kNoRows;
      }
    }
    if (static_cast<size_t>(dim) < i) {
      // The rows lead the group when only unit dims come before them; they go to the group's first
      // result dim that is not a unit one.
      for (size_t d = group_in; d < static_cast<size_t>(dim); ++d)
        if (in[d] != 1) return kNoRows;
      size_t first = group_out;
      while (first + 1 < o && out[first] == 1) ++first;
      return static_cast<int>(first);
    }
  }
  return kNoRows;
}

}  // namespace

Status checkMicrobatchesComputeTheBatch(const Graph& graph, int num_microbatches) {
  if (num_microbatches <= 1) return Status::ok();
  std::vector<int> rows(graph.values.size(), kNoRows);  // per value: the dim holding the batch rows
  std::vector<int32_t> across(graph.values.size(), -1);  // per value: the node computing it across rows
  for (ValueId v : graph.inputs)
    if (graph.values[v].type.rank() > 0) rows[v] = 0;
  const std::string flag = "--microbatches " + std::to_string(num_microbatches) + ": ";
  auto acrossError = [&](int32_t origin, const std::string& use) {
    return Status::badInput(flag + nodeContext(graph, graph.nodes[origin]) +
                            "computed across the batch rows, and " + use +
                            ": each microbatch would compute it from its own rows, so the plan would not compute "
                            "what the whole batch computes (BatchNorm's batch statistics in training are such a "
                            "value); train with one microbatch");
  };
  for (int32_t n = 0; n < static_cast<int32_t>(graph.nodes.size()); ++n) {
    const Node& node = graph.nodes[n];
    int32_t origin = -1;
    bool with_rows = node.op == OpId::recv;
    for (ValueId v : node.operands) {
      if (across[v] >= 0) origin = across[v];
      with_rows = with_rows || rows[v] != kNoRows;
    }
    if (origin >= 0 && with_rows)
      return acrossError(origin, nodeContext(graph, node) + "uses it with them");
    if (node.op == OpId::recv) {
      for (ValueId r : node.results)
        if (graph.values[r].type.rank() > 0) rows[r] = 0;
      continue;
    }
    if (!with_rows) {
      for (ValueId r : node.results) across[r] = origin;
      continue;
    }
    const OpDef& def = opDef(node.op);
    std::vector<TensorType> operand_types, result_types;
    for (ValueId v : node.operands) operand_types.push_back(graph.values[v].type);
    for (ValueId r : node.results) result_types.push_back(graph.values[r].type);
    bool mixes = false;
    if (def.reshape_like && node.operands.size() == 1 && node.results.size() == 1) {
      rows[node.results[0]] = rowsThroughView(operand_types[0].shape, result_types[0].shape, rows[node.operands[0]]);
      continue;
    }
    const ShardingRule rule = def.sharding(OpContext{def, operand_types, result_types, node.attrs});
    // (An empty rule: the op's shapes could not be inferred again; its rows are not followed.)
    if (rule.operand_dims.size() != node.operands.size() || rule.result_dims.size() != node.results.size()) continue;
    for (size_t i = 0; i < node.operands.size(); ++i) {
      const int dim = rows[node.operands[i]];
      if (dim == kNoRows || static_cast<size_t>(dim) >= rule.operand_dims[i].size()) continue;
      const int factor = rule.operand_dims[i][static_cast<size_t>(dim)];
      if (factor == ShardingRule::kNoFactor) continue;
      // Sums over the rows mix them. A factor that needs replication is not followed: the rules
      // also give it to dims an op indexes (gather_elements' data), which it reads without summing.
      const FactorKind kind = rule.factor_kinds[static_cast<size_t>(factor)];
      if (kind == FactorKind::kReduction) mixes = true;
      if (kind != FactorKind::kPassThrough) continue;
      for (size_t r = 0; r < node.results.size(); ++r)
        for (size_t d = 0; d < rule.result_dims[r].size(); ++d)
          if (rule.result_dims[r][d] == factor && rows[node.results[r]] == kNoRows)
            rows[node.results[r]] = static_cast<int>(d);
    }
    if (mixes)
      for (ValueId r : node.results) {
        rows[r] = kNoRows;
        across[r] = n;
      }
  }
  for (const StateUpdate& update : graph.updates)
    if (across[update.new_value] >= 0)
      return acrossError(across[update.new_value],
                         "the state '%" + graph.values[update.target].name + "' keeps it (from '%" +
                             graph.values[update.new_value].name + "')");
  return Status::ok();
}

}  // namespace cleave
