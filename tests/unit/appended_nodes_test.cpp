// AppendedNodes: appended nodes go right before the original node they were put with, in the order
// they were put; dropped nodes go; node groups follow; producers are renumbered.
#include "ir/appended_nodes.h"

#include <gtest/gtest.h>

#include "ir/text_format.h"

namespace cleave {
namespace {

TEST(AppendedNodes, PutsAppendedNodesInPlaceAndDropsReplacedOnes) {
  auto parsed = parseGraph(R"(graph @g {
  input %x : f32[4]
  %a = relu(%x)
  %b = neg(%a)
  %c = exp(%b)
  output %c
})",
                           "g.cir");
  ASSERT_TRUE(parsed) << parsed.status().message();
  Graph& graph = *parsed;
  AppendedNodes placed(graph);
  ASSERT_EQ(placed.original(), 3u);
  // %b = neg(%a) becomes %b = neg(sqrt(%a)) with the sqrt appended, and %c is replaced by a sigmoid.
  const size_t begin = graph.nodes.size();
  auto root = graph.addNode(OpId::sqrt, {graph.findValue("a")}, {}, {}, {"a_sqrt"});
  ASSERT_TRUE(root) << root.status().message();
  graph.nodes[1].operands[0] = (*root)[0];
  placed.putBefore(1, begin, graph.nodes.size());
  auto sigmoid = graph.addNode(OpId::sigmoid, {graph.findValue("b")}, {}, {}, {"s"});
  ASSERT_TRUE(sigmoid) << sigmoid.status().message();
  graph.outputs[0] = (*sigmoid)[0];
  placed.putBefore(2, graph.nodes.size() - 1);
  placed.drop(2);
  std::vector<int64_t> groups = {7, 8, 9, -1, -1};
  placed.apply(graph, &groups);

  ASSERT_EQ(graph.nodes.size(), 4u);
  const std::vector<OpId> ops = {OpId::relu, OpId::sqrt, OpId::neg, OpId::sigmoid};
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(graph.nodes[i].op, ops[i]) << i;
    for (ValueId r : graph.nodes[i].results) EXPECT_EQ(graph.values[r].producer, static_cast<int32_t>(i));
  }
  EXPECT_EQ(groups, (std::vector<int64_t>{7, 8, 8, 9}));  // each appended node takes its place's group
  EXPECT_EQ(graph.findValue("c"), kNoValue);               // the dropped node's result is gone
  EXPECT_EQ(graph.values[graph.outputs[0]].name, "s");
}

}  // namespace
}  // namespace cleave
