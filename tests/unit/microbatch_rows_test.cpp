// Unit tests of checkMicrobatchesComputeTheBatch: values computed across the batch rows.
#include "passes/partition/microbatch_rows.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/test_graphs.h"

namespace cleave {
namespace {

using test::parse;

// A batch mean subtracted from the rows (BatchNorm's centring) is what one microbatch cannot compute.
TEST(MicrobatchRows, BatchStatisticUsedWithTheRowsIsAnError) {
  Graph g = parse(R"(graph @g {
    input %x : f32[8,4]
    param %w : f32[4,4] = uniform {high = 0.5, low = -0.5, seed = 1}
    %h = matmul(%x, %w) : f32[8,4]
    %m = reduce_mean(%h) {axes = [0], keepdims = 1} : f32[1,4]
    %twice = mul(%m, %m) : f32[1,4]
    %c = sub(%h, %twice) : f32[8,4]
    output %c
  })");
  EXPECT_TRUE(checkMicrobatchesComputeTheBatch(g, 1).isOk());
  Status status = checkMicrobatchesComputeTheBatch(g, 2);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find("reduce_mean '%m': computed across the batch rows"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("sub '%c': uses it with them"), std::string::npos) << status.message();
}

// Kept as state (BatchNorm's running mean), the statistic is an error too.
TEST(MicrobatchRows, BatchStatisticKeptAsStateIsAnError) {
  Graph g = parse(R"(graph @g {
    input %x : f32[8,4]
    param %running : f32[1,4] = zeros
    %m = reduce_mean(%x) {axes = [0], keepdims = 1} : f32[1,4]
    %y = relu(%x) : f32[8,4]
    output %y
    update %running = %m
  })");
  Status status = checkMicrobatchesComputeTheBatch(g, 4);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the state '%running' keeps it"), std::string::npos) << status.message();
}

// Rows stay apart through per-row ops, a reshape merging them with the sequence, a transpose that
// keeps them first and a softmax over the last dim; a mean over everything that is only an output
// (the loss, averaged over microbatches) is fine.
TEST(MicrobatchRows, PerRowComputationAndAnOutputMeanAreFine) {
  Graph g = parse(R"(graph @g {
    input %x : f32[8,6,4]
    param %w : f32[4,4] = uniform {high = 0.5, low = -0.5, seed = 1}
    %flat = reshape(%x) {shape = [48, 4]} : f32[48,4]
    %h = matmul(%flat, %w) : f32[48,4]
    %back = reshape(%h) {shape = [8, 6, 4]} : f32[8,6,4]
    %t = transpose(%back) {perm = [0, 2, 1]} : f32[8,4,6]
    %s = softmax(%t) {axis = -1} : f32[8,4,6]
    %n = relu(%s) : f32[8,4,6]
    %loss = reduce_mean(%n) {keepdims = 0} : f32[]
    output %n, %loss
  })");
  EXPECT_TRUE(checkMicrobatchesComputeTheBatch(g, 2).isOk());
}

// A product contracting the rows (a Gram matrix of the batch) is a sum over them, found through a
// view that keeps them the leading dim.
TEST(MicrobatchRows, ProductOverTheRowsIsFoundThroughAView) {
  Graph g = parse(R"(graph @g {
    input %x : f32[8,2,4]
    %flat = reshape(%x) {shape = [8, 8]} : f32[8,8]
    %gram = matmul(%flat, %flat) {transpose_a = 1} : f32[8,8]
    %y = matmul(%flat, %gram) : f32[8,8]
    output %y
  })");
  Status status = checkMicrobatchesComputeTheBatch(g, 2);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("matmul '%gram': computed across the batch rows"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace cleave
