// AppendedNodes: one pass over the original nodes builds the new order.
#include "ir/appended_nodes.h"

#include <utility>

namespace cleave {

AppendedNodes::AppendedNodes(const Graph& graph) : before_(graph.nodes.size()), dropped_(graph.nodes.size(), false) {}

void AppendedNodes::putBefore(size_t node, size_t appended) { before_[node].push_back(appended); }

void AppendedNodes::putBefore(size_t node, size_t begin, size_t end) {
  for (size_t a = begin; a < end; ++a) putBefore(node, a);
}

void AppendedNodes::apply(Graph& graph, std::vector<int64_t>* node_group) const {
  const bool grouped = node_group && !node_group->empty();
  std::vector<Node> nodes;
  std::vector<int64_t> groups;
  nodes.reserve(graph.nodes.size());
  for (size_t i = 0; i < before_.size(); ++i) {
    const int64_t group = grouped ? (*node_group)[i] : 0;
    for (size_t a : before_[i]) {
      nodes.push_back(std::move(graph.nodes[a]));
      groups.push_back(group);
    }
    if (dropped_[i]) continue;
    nodes.push_back(std::move(graph.nodes[i]));
    groups.push_back(group);
  }
  graph.nodes = std::move(nodes);
  graph.compact();
  if (grouped) *node_group = std::move(groups);
}

}  // namespace cleave
