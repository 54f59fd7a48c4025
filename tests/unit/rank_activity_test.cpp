// Tests of RankActivity and the stall warnings: what a rank reports doing, the chain from the rank
// waited for to the one at fault, the warning times, and a local all-reduce kept waiting.
#include "runtime/comm/rank_activity.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <thread>

#include "runtime/comm/local_communicator.h"

namespace cleave::runtime {
namespace {

TEST(RankActivityTest, DescribesTheInstructionEachLaneRuns) {
  RankActivity activity;
  EXPECT_EQ(activity.describe().rfind("between instructions for ", 0), 0u) << activity.describe();
  const std::string matmul = "instruction 14 of train (matmul from m.cir:9:3)";
  const std::string reduce = "instruction 20 of train (all_reduce)";
  activity.begin(RankActivity::kCompute, &matmul);
  EXPECT_EQ(RankActivity::currentInstruction(), matmul);
  EXPECT_TRUE(std::regex_match(activity.describe(), std::regex(R"(in instruction 14 of train \(matmul from m\.cir:9:3\) for 0\.\d s)")))
      << activity.describe();
  std::thread([&] { activity.begin(RankActivity::kCommunication, &reduce); }).join();
  EXPECT_NE(activity.describe().find("its communication thread in " + reduce), std::string::npos) << activity.describe();
  activity.end(RankActivity::kCompute);
  EXPECT_EQ(RankActivity::currentInstruction(), "");
  EXPECT_EQ(activity.describe().rfind("in " + reduce + " for ", 0), 0u) << activity.describe();
}

TEST(RankActivityTest, TheChainEndsAtTheRankAtFault) {
  std::map<int, StalledRank> ranks = {
      {1, {1, 2, "in instruction 9 of train (recv from rank 2) for 10 s", true}},
      {2, {2, -1, "in instruction 14 of train (matmul) for 10.1 s", true}},
      {3, {3, -1, "", false}},
      {4, {4, 5, "in instruction 3 of train (recv)", true}},
      {5, {5, 4, "in instruction 4 of train (recv)", true}},
  };
  auto find = [&](int rank) { return ranks.at(rank); };
  EXPECT_EQ(stallChain(0, 1, find),
            "rank 1 waits for rank 2 (in instruction 9 of train (recv from rank 2) for 10 s); rank 2 is in "
            "instruction 14 of train (matmul) for 10.1 s");
  EXPECT_EQ(stallChain(0, 3, find), "rank 3 does not answer (its process died, is stopped, or is cut off)");
  EXPECT_NE(stallChain(0, 4, find).find("rank 5 waits for rank 4 (in instruction 4 of train (recv)): the ranks wait "
                                        "for each other"),
            std::string::npos)
      << stallChain(0, 4, find);
}

TEST(RankActivityTest, WarningsComeAfterTheIntervalThenTwiceAsLong) {
  using Clock = StallClock::Clock;
  const Clock::time_point start = Clock::now();
  StallClock clock(2.0, start);
  auto at = [&](double seconds) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  EXPECT_FALSE(clock.due(at(1.9)));
  EXPECT_TRUE(clock.due(at(2.1)));
  EXPECT_FALSE(clock.due(at(3.9)));
  EXPECT_TRUE(clock.due(at(4.0)));
  EXPECT_FALSE(clock.due(at(7.9)));
  EXPECT_TRUE(clock.due(at(8.0)));
  StallClock off(0, start);
  EXPECT_FALSE(off.due(at(1e6)));
  EXPECT_EQ(off.next(), Clock::time_point::max());
}

TEST(RankActivityTest, ALocalAllReduceKeptWaitingNamesTheRankAndItsInstruction) {
  auto endpoints = createLocalCommunicators(2, /*timeout_seconds=*/10, /*stall_seconds=*/0.2);
  const std::string slow = "instruction 7 of train (matmul from slow.cir:3:1)";
  std::vector<float> a = {1, 2}, b = {3, 4};
  const std::vector<int> group = {0, 1};
  testing::internal::CaptureStderr();
  std::thread late([&] {
    rankActivity(1).begin(RankActivity::kCompute, &slow);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    rankActivity(1).end(RankActivity::kCompute);
    TensorView view{b.data(), {DType::kF32, {2}}};
    EXPECT_TRUE(endpoints[1]->allReduce(group, {&view, 1}, {&view, 1}, ReduceOp::kSum).isOk());
  });
  TensorView view{a.data(), {DType::kF32, {2}}};
  EXPECT_TRUE(endpoints[0]->allReduce(group, {&view, 1}, {&view, 1}, ReduceOp::kSum).isOk());
  late.join();
  std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_EQ(a, (std::vector<float>{4, 6}));
  EXPECT_NE(warnings.find("cleave: warning: rank 0 has waited 0.2 s for rank 1 in all_reduce over ranks {0,1}; rank 1 "
                          "is in instruction 7 of train (matmul from slow.cir:3:1) for 0."),
            std::string::npos)
      << warnings;
}

}  // namespace
}  // namespace cleave::runtime
