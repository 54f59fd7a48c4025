// Gradient buckets: merges the backward pass's data-parallel all-reduces, in the order gradients appear.
#include "passes/gradient_buckets.h"

#include <set>
#include <utility>

#include "ir/op_table.h"
#include "passes/pass_manager.h"

namespace cleave {
namespace {

bool isBucketable(const Node& node) {
  if (node.op != OpId::all_reduce || node.operands.size() != 1) return false;
  OpContext attrs{opDef(node.op), {}, {}, node.attrs};
  return attrs.getString("axis") == "dp" && attrs.getString("reduce") == "sum";
}

}  // namespace

Status bucketGradientAllReduces(Graph& graph, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) return Status::usage("bucket size must be positive, got " + std::to_string(bucket_bytes));
  // 1. The backward pass starts at the first node whose result is a gradient (autodiff names them "*.grad...").
  size_t backward_start = graph.nodes.size();
  for (size_t i = 0; i < graph.nodes.size() && backward_start == graph.nodes.size(); ++i)
    for (ValueId r : graph.nodes[i].results)
      if (graph.values[r].name.find(".grad") != std::string::npos) backward_start = i;

  // 2. Walk the nodes; hold bucketable all-reduces in a pending bucket and issue it when it is
  //    full or when a node is about to read one of its results.
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
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (i >= backward_start && isBucketable(node)) {
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
      continue;
    }
    for (ValueId v : node.operands)
      if (pending_results.count(v)) {
        issue();
        break;
      }
    ordered.push_back(std::move(node));
  }
  issue();
  // 3. Producers point at the new positions.
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
