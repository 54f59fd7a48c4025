// runParallelTasks: every task runs once, the lowest-numbered failure is the one reported, a task's
// exception reaches the caller, and tasks that start parallel work run it on their own thread.
#include "ir/parallel_tasks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <set>
#include <thread>
#include <vector>

namespace cleave {
namespace {

TEST(ParallelTasks, RunsEveryTaskOnce) {
  std::vector<std::atomic<int>> runs(100);
  ASSERT_TRUE(runParallelTasks(runs.size(), [&](size_t i) {
                ++runs[i];
                return Status::ok();
              }).isOk());
  for (const auto& count : runs) EXPECT_EQ(count.load(), 1);
  EXPECT_TRUE(runParallelTasks(0, [](size_t) { return Status::internal("never runs"); }).isOk());
}

TEST(ParallelTasks, ReportsTheLowestNumberedFailure) {
  // Task 3 fails at once, task 1 only after the others had time to start: 1 is reported.
  for (int attempt = 0; attempt < 20; ++attempt) {
    Status status = runParallelTasks(8, [](size_t i) {
      if (i == 1) {
        std::this_thread::yield();
        return Status::badInput("task 1");
      }
      return i == 3 ? Status::badInput("task 3") : Status::ok();
    });
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.message(), "task 1");
  }
}

TEST(ParallelTasks, RethrowsATasksException) {
  EXPECT_THROW((void)runParallelTasks(4,
                                      [](size_t i) -> Status {
                                        if (i == 2) throw std::bad_alloc();
                                        return Status::ok();
                                      }),
               std::bad_alloc);
}

TEST(ParallelTasks, NestedTasksRunOnTheirTasksThread) {
  std::vector<std::set<std::thread::id>> inner_threads(4);
  std::vector<std::thread::id> outer_thread(4);
  ASSERT_TRUE(runParallelTasks(4, [&](size_t i) {
                outer_thread[i] = std::this_thread::get_id();
                return runParallelTasks(8, [&, i](size_t) {
                  inner_threads[i].insert(std::this_thread::get_id());
                  return Status::ok();
                });
              }).isOk());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(inner_threads[i], std::set<std::thread::id>{outer_thread[i]});
}

}  // namespace
}  // namespace cleave
