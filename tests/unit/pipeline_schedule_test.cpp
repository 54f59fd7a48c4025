// Unit tests of the pipeline schedules: every step once, in-flight limits, and no deadlock across stages.
#include "passes/lowering/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace cleave {
namespace {

constexpr PipelineScheduleKind kKinds[] = {PipelineScheduleKind::kGPipe, PipelineScheduleKind::kOneForwardOneBackward};

// The most microbatches whose forward step ran and whose backward step has not, along `steps`.
int peakInFlight(const std::vector<PipelineStep>& steps) {
  int in_flight = 0, peak = 0;
  for (const PipelineStep& step : steps) {
    in_flight += step.backward ? -1 : 1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

TEST(PipelineSchedule, ParsesNames) {
  EXPECT_EQ(*parsePipelineSchedule("gpipe"), PipelineScheduleKind::kGPipe);
  EXPECT_EQ(*parsePipelineSchedule("1f1b"), PipelineScheduleKind::kOneForwardOneBackward);
  auto bad = parsePipelineSchedule("zero-bubble");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().kind(), ErrorKind::kUsage);
  EXPECT_EQ(bad.status().message(), "unknown pipeline schedule 'zero-bubble' (expected gpipe or 1f1b)");
  for (PipelineScheduleKind kind : kKinds) EXPECT_EQ(*parsePipelineSchedule(pipelineScheduleName(kind)), kind);
}

TEST(PipelineSchedule, EveryStepOnceForwardBeforeBackwardInMicrobatchOrder) {
  for (PipelineScheduleKind kind : kKinds)
    for (int stages = 2; stages <= 4; ++stages)
      for (int microbatches = 1; microbatches <= 8; ++microbatches)
        for (int stage = 0; stage < stages; ++stage) {
          SCOPED_TRACE(std::string(pipelineScheduleName(kind)) + " P=" + std::to_string(stages) +
                       " M=" + std::to_string(microbatches) + " s=" + std::to_string(stage));
          std::vector<PipelineStep> steps = stageSchedule(kind, stage, stages, microbatches);
          ASSERT_EQ(steps.size(), 2u * microbatches);
          std::set<std::pair<bool, int>> seen;
          int next_forward = 0, next_backward = 0;
          for (const PipelineStep& step : steps) {
            EXPECT_TRUE(seen.insert({step.backward, step.microbatch}).second);
            if (step.backward) {
              EXPECT_EQ(step.microbatch, next_backward++);
              EXPECT_LT(step.microbatch, next_forward) << "backward before its forward";
            } else {
              EXPECT_EQ(step.microbatch, next_forward++);
            }
          }
        }
}

TEST(PipelineSchedule, InFlightMicrobatches) {
  for (int stages = 2; stages <= 4; ++stages)
    for (int microbatches = 1; microbatches <= 8; ++microbatches)
      for (int stage = 0; stage < stages; ++stage) {
        SCOPED_TRACE("P=" + std::to_string(stages) + " M=" + std::to_string(microbatches) + " s=" + std::to_string(stage));
        auto gpipe = stageSchedule(PipelineScheduleKind::kGPipe, stage, stages, microbatches);
        auto one_f_one_b = stageSchedule(PipelineScheduleKind::kOneForwardOneBackward, stage, stages, microbatches);
        EXPECT_EQ(peakInFlight(gpipe), microbatches);
        EXPECT_LE(peakInFlight(one_f_one_b), stages - stage);
        EXPECT_EQ(peakInFlight(one_f_one_b), std::min(stages - stage, microbatches));
        EXPECT_EQ(microbatchesInFlight(PipelineScheduleKind::kGPipe, stage, stages, microbatches), microbatches);
        EXPECT_EQ(microbatchesInFlight(PipelineScheduleKind::kOneForwardOneBackward, stage, stages, microbatches),
                  peakInFlight(one_f_one_b));
      }
}

TEST(PipelineSchedule, OneForwardOneBackwardShape) {
  // P = 4, M = 6, stage 1: two warm-up forwards, then F2 B0 F3 B1 F4 B2 F5 B3, then B4 B5.
  std::vector<PipelineStep> expected = {{false, 0}, {false, 1}, {false, 2}, {true, 0}, {false, 3}, {true, 1},
                                        {false, 4}, {true, 2},  {false, 5}, {true, 3}, {true, 4},  {true, 5}};
  EXPECT_EQ(stageSchedule(PipelineScheduleKind::kOneForwardOneBackward, 1, 4, 6), expected);
  // The last stage alternates from the start.
  std::vector<PipelineStep> last = {{false, 0}, {true, 0}, {false, 1}, {true, 1}};
  EXPECT_EQ(stageSchedule(PipelineScheduleKind::kOneForwardOneBackward, 3, 4, 2), last);
}

// Runs every stage's steps with buffered sends: (F, m) on stage s waits for (F, m) on s-1, and
// (B, m) waits for (B, m) on s+1. Returns true when every stage finishes.
bool runsToCompletion(PipelineScheduleKind kind, int stages, int microbatches) {
  std::vector<std::vector<PipelineStep>> steps;
  for (int s = 0; s < stages; ++s) steps.push_back(stageSchedule(kind, s, stages, microbatches));
  std::vector<std::set<std::pair<bool, int>>> done(stages);
  std::vector<size_t> next(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < steps[s].size()) {
        const PipelineStep& step = steps[s][next[s]];
        const int from = step.backward ? s + 1 : s - 1;
        if (from >= 0 && from < stages && !done[from].count({step.backward, step.microbatch})) break;
        done[s].insert({step.backward, step.microbatch});
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s)
    if (next[s] != steps[s].size()) return false;
  return true;
}

TEST(PipelineSchedule, StagesNeverWaitForEachOtherForever) {
  for (PipelineScheduleKind kind : kKinds)
    for (int stages = 2; stages <= 4; ++stages)
      for (int microbatches = 1; microbatches <= 8; ++microbatches)
        EXPECT_TRUE(runsToCompletion(kind, stages, microbatches))
            << pipelineScheduleName(kind) << " P=" << stages << " M=" << microbatches;
}

TEST(PipelineSchedule, InterleavedShapeIsMegatrons) {
  // P = 2, V = 2, M = 4, rank 0: (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 warm-up forwards (microbatches
  // 0, 1 through chunk 0, then through chunk 1), then F and B alternating, backwards through chunk 1
  // first.
  std::vector<InterleavedStep> expected = {
      {0, {false, 0}}, {0, {false, 1}}, {1, {false, 0}}, {1, {false, 1}}, {0, {false, 2}}, {1, {true, 0}},
      {0, {false, 3}}, {1, {true, 1}},  {1, {false, 2}}, {0, {true, 0}},  {1, {false, 3}}, {0, {true, 1}},
      {1, {true, 2}},  {1, {true, 3}},  {0, {true, 2}},  {0, {true, 3}}};
  EXPECT_EQ(interleavedSchedule(0, 2, 2, 4), expected);
  // As many microbatches as stages: every forward first.
  std::vector<InterleavedStep> all_forward = interleavedSchedule(1, 2, 2, 2);
  ASSERT_EQ(all_forward.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_FALSE(all_forward[i].step.backward);
  // A virtual stage's own steps, in its rank's order.
  std::vector<PipelineStep> chunk1 = {{false, 0}, {false, 1}, {true, 0}, {true, 1},
                                      {false, 2}, {false, 3}, {true, 2}, {true, 3}};
  EXPECT_EQ(virtualStageSchedule(2, 2, 2, 4), chunk1);
}

// Runs interleaved 1F1B with buffered sends over P x V virtual stages (virtual stage c on rank
// c % P): (F, m) of c waits for (F, m) of c - 1, (B, m) of c for (B, m) of c + 1. Every rank
// must finish, and each virtual stage must run each step once, backward after forward.
bool interleavedRunsToCompletion(int stages, int chunks, int microbatches) {
  std::vector<std::vector<InterleavedStep>> steps;
  for (int s = 0; s < stages; ++s) steps.push_back(interleavedSchedule(s, stages, chunks, microbatches));
  const int virtual_stages = stages * chunks;
  std::vector<std::set<std::pair<bool, int>>> done(virtual_stages);
  std::vector<size_t> next(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s)
      while (next[s] < steps[s].size()) {
        const InterleavedStep& step = steps[s][next[s]];
        const int c = step.chunk * stages + s;
        const int from = step.step.backward ? c + 1 : c - 1;
        if (from >= 0 && from < virtual_stages && !done[from].count({step.step.backward, step.step.microbatch})) break;
        if (step.step.backward && !done[c].count({false, step.step.microbatch})) return false;
        if (!done[c].insert({step.step.backward, step.step.microbatch}).second) return false;
        ++next[s];
        progress = true;
      }
  }
  for (int c = 0; c < virtual_stages; ++c)
    if (static_cast<int>(done[c].size()) != 2 * microbatches) return false;
  return true;
}

TEST(PipelineSchedule, InterleavedStagesNeverWaitForEachOtherForever) {
  for (int stages = 2; stages <= 4; ++stages)
    for (int chunks = 1; chunks <= 4; ++chunks)
      for (int microbatches = stages; microbatches <= 4 * stages; microbatches += stages)
        EXPECT_TRUE(interleavedRunsToCompletion(stages, chunks, microbatches))
            << "P=" << stages << " V=" << chunks << " M=" << microbatches;
}

}  // namespace
}  // namespace cleave
