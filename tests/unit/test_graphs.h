// Graphs for unit tests: parsed from cleave's text IR, and counted by op.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/text_format.h"

namespace cleave::test {

// The graph `text` describes (its file named t.cir in messages); a failed expectation and an empty
// graph when it does not parse.
inline Graph parse(std::string_view text) {
  auto graph = parseGraph(text, "t.cir");
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph{};
}

// How many of the graph's nodes are of `op`.
inline int countOps(const Graph& graph, OpId op) {
  int n = 0;
  for (const Node& node : graph.nodes) n += node.op == op;
  return n;
}

}  // namespace cleave::test
