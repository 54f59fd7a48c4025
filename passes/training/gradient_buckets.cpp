// Gradient buckets: merges the backward pass's data-parallel all-reduces, in the order gradients appear.
#include "passes/training/gradient_buckets.h"

#include "ir/device_mesh.h"

#include <map>
#include <set>
#include <utility>

#include "ir/op_table.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

bool isBucketable(const Node& node) { return node.operands.size() == 1 && isDataParallelGradientSum(node); }

}  // namespace

bool isOverDataParallel(const Node& node, OpId op) {
  return node.op == op && OpContext{opDef(node.op), {}, {}, node.attrs}.getString("axis") == kDataAxis;
}

bool isDataParallelGradientSum(const Node& node) {
  return isOverDataParallel(node, OpId::all_reduce) &&
         OpContext{opDef(node.op), {}, {}, node.attrs}.getString("reduce") == "sum";
}

Status bucketGradientAllReduces(Graph& graph, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) return Status::usage("bucket size must be positive, got " + std::to_string(bucket_bytes));
  // 1. The backward pass starts at the first node whose result is a gradient (autodiff names them "*.grad...").
  size_t backward_start = graph.nodes.size();
  for (size_t i = 0; i < graph.nodes.size() && backward_start == graph.nodes.size(); ++i)
    for (ValueId r : graph.nodes[i].results)
      if (graph.values[r].name.find(".grad") != std::string::npos) backward_start = i;
  // 2. The bucketable all-reduces, by the value they reduce (it is final once produced: autodiff
  //    sums every contribution to a gradient before using it).
  std::vector<bool> bucketable(graph.nodes.size(), false);
  std::multimap<ValueId, size_t> reducing;  // operand -> all-reduce node
  for (size_t i = backward_start; i < graph.nodes.size(); ++i)
    if (isBucketable(graph.nodes[i])) {
      bucketable[i] = true;
      reducing.emplace(graph.nodes[i].operands[0], i);
    }

  // 3. Walk the nodes; an all-reduce joins the pending bucket as soon as its operand exists, and
  //    the bucket is issued when full or just before a node reads one of its results.
  std::vector<Node> ordered;
  Node bucket;
  int64_t pending_bytes = 0;
  std::set<ValueId> pending_results;
  auto issue = [&]() {
    if (bucket.operands.empty()) return;
    ordered.push_back(std::move(bucket));
    bucket = Node{};
    pending_bytes = 0;
    pending_results.clear();
  };
  auto join = [&](size_t index) {
    const Node& node = graph.nodes[index];
    int64_t bytes = graph.values[node.operands[0]].type.bytes();
    if (!bucket.operands.empty() && pending_bytes + bytes > bucket_bytes) issue();
    if (bucket.operands.empty()) {
      bucket.op = OpId::all_reduce;
      bucket.attrs = node.attrs;
      bucket.loc = node.loc;
    }
    bucket.operands.push_back(node.operands[0]);
    bucket.results.push_back(node.results[0]);
    pending_results.insert(node.results[0]);
    pending_bytes += bytes;
    if (pending_bytes >= bucket_bytes) issue();
  };
  auto joinReady = [&](ValueId v) {
    auto [first, last] = reducing.equal_range(v);
    for (auto it = first; it != last; ++it) join(it->second);
  };
  // Operands that exist before the walk reaches them (inputs, parameters) are ready at the start.
  for (const auto& [operand, index] : reducing)
    if (graph.values[operand].producer < 0) join(index);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (bucketable[i]) continue;
    Node& node = graph.nodes[i];
    for (ValueId v : node.operands)
      if (pending_results.count(v)) {
        issue();
        break;
      }
    std::vector<ValueId> results = node.results;
    ordered.push_back(std::move(node));
    for (ValueId r : results) joinReady(r);
  }
  issue();
  // 4. Producers point at the new positions.
  graph.nodes = std::move(ordered);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (size_t r = 0; r < graph.nodes[i].results.size(); ++r) {
      graph.values[graph.nodes[i].results[r]].producer = static_cast<int32_t>(i);
      graph.values[graph.nodes[i].results[r]].result_index = static_cast<int32_t>(r);
    }
  return Status::ok();
}

namespace {

Status runBucketPass(Graph& graph, const PassOptions& options) {
  return bucketGradientAllReduces(graph, options.getInt("bytes"));
}

}  // namespace

PassInfo makeBucketAllReducePass() {
  return PassInfo{
      .name = "bucket-all-reduce",
      .summary = "merge the backward pass's data-parallel gradient all-reduces into buckets issued as soon as "
                 "their gradients exist",
      .options = {{"bytes", kDefaultBucketBytes, "largest bucket in bytes (a larger gradient gets its own)"}},
      .run = runBucketPass,
  };
}

}  // namespace cleave
