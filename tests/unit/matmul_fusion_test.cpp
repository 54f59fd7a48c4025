// Unit tests of the folds into matrix products (passes/fusion/matmul_fusion.h) on graphs whose nodes
// carry pipeline steps: nothing folds across a step.
#include <gtest/gtest.h>

#include "ir/verifier.h"
#include "passes/fusion/matmul_fusion.h"
#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::countOps;
using test::parse;

const char* kHeads = R"(graph @g {
  input %q.heads : f32[2,5,3,4]
  input %k.heads : f32[2,5,3,4]
  %q = transpose(%q.heads) {perm = [0, 2, 1, 3]}
  %k = transpose(%k.heads) {perm = [0, 2, 1, 3]}
  %scores = matmul(%q, %k) {transpose_b = 1}
  output %scores
})";

TEST(MatmulFusion, TransposesFoldOnlyWithinOnePipelineStep) {
  Graph same = parse(kHeads);
  std::vector<int64_t> steps = {0, 0, 0};
  auto folded = fuseIntoMatmuls(same, &steps);
  ASSERT_TRUE(folded) << folded.status().message();
  EXPECT_EQ(*folded, 2);
  EXPECT_EQ(countOps(same, OpId::transpose), 0);
  EXPECT_EQ(steps, std::vector<int64_t>{0});
  EXPECT_TRUE(verifyGraph(same)) << verifyGraph(same).message();

  // k's transpose in another step (a microbatch's backward, say) stays, and so does the product's
  // reading of it; q's folds.
  Graph split = parse(kHeads);
  steps = {0, 1, 0};
  folded = fuseIntoMatmuls(split, &steps);
  ASSERT_TRUE(folded) << folded.status().message();
  EXPECT_EQ(*folded, 1);
  EXPECT_EQ(countOps(split, OpId::transpose), 1);
  EXPECT_EQ(countOps(split, OpId::fused_matmul), 1);
  EXPECT_EQ(steps.size(), split.nodes.size());
  EXPECT_TRUE(verifyGraph(split)) << verifyGraph(split).message();
}

}  // namespace
}  // namespace cleave
