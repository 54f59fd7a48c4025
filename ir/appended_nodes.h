// Putting nodes a rewrite appended where they belong.
//
// Graph::addNode appends, so a pass that rewrites nodes in the middle of a graph adds the new nodes
// at the end and then moves them. AppendedNodes records, for each of the graph's original nodes,
// the appended nodes that go right before it and whether the original node itself stays (a node
// replaced by the nodes put before it is dropped), then reorders the graph once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace cleave {

class AppendedNodes {
 public:
  // The graph's nodes now are its original ones.
  explicit AppendedNodes(const Graph& graph);

  size_t original() const { return before_.size(); }
  // Appended node `appended` (an index at or past original()) goes right before original node
  // `node`, after those already put there.
  void putBefore(size_t node, size_t appended);
  // Appended nodes [begin, end) go right before original node `node`, in that order.
  void putBefore(size_t node, size_t begin, size_t end);
  // Original node `node` goes.
  void drop(size_t node) { dropped_[node] = true; }

  // Reorders graph.nodes: each original node that stays, with the appended nodes put before it in
  // front; appended nodes put nowhere go. Then Graph::compact (value ids change). With `node_group`
  // (one entry per node before, as the pipeline's stage of each node), each appended node takes the
  // group of the original node it is put before.
  void apply(Graph& graph, std::vector<int64_t>* node_group = nullptr) const;

 private:
  std::vector<std::vector<size_t>> before_;  // per original node: the appended nodes in front of it
  std::vector<bool> dropped_;
};

}  // namespace cleave
