// runParallelTasks: every task runs once, the lowest-numbered failure is the one reported, a task's
// exception reaches the caller, tasks that start parallel work run it on their own thread, and
// threads that cannot be started leave the tasks to the calling thread.
#include "ir/parallel_tasks.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <new>
#include <set>
#include <system_error>
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

// In a child process whose address space is capped 4 MiB above what it uses, a thread's stack (8 MiB)
// cannot be mapped: the tasks run on the calling thread (before, std::thread's exception escaped with
// the started threads still joinable, and the process aborted). ASan's shadow memory makes the cap
// meaningless; the test skips there.
TEST(ParallelTasks, RunWhereNoThreadCanStart) {
#ifdef CLEAVE_SANITIZED  // tests/CMakeLists.txt: a sanitizer build
  GTEST_SKIP() << "address-space caps do not apply under the sanitizers' shadow memory";
#else
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one hardware thread: no thread is started anyway";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<int> ran(8, 0);  // allocated before the cap
    long pages = 0;
    if (FILE* statm = fopen("/proc/self/statm", "r")) {
      if (fscanf(statm, "%ld", &pages) != 1) pages = 0;
      fclose(statm);
    }
    if (pages == 0) _exit(2);
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{4} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    // After fork, glibc keeps the parent's other threads' stacks (OpenBLAS's) for new threads: hold
    // threads on them until no more can start.
    std::atomic<bool> release{false};
    std::vector<std::thread> holders;
    holders.reserve(64);
    try {
      while (holders.size() < holders.capacity())
        holders.emplace_back([&release] {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
    } catch (const std::system_error&) {
    }
    if (holders.size() == holders.capacity()) _exit(5);
    const Status status = runParallelTasks(ran.size(), [&](size_t i) {
      ran[i] = 1;
      return Status::ok();
    });
    release = true;
    for (std::thread& holder : holders) holder.join();
    for (int r : ran)
      if (r != 1) _exit(3);
    _exit(status.isOk() ? 0 : 4);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status)) << "the child died by signal " << WTERMSIG(wait_status);
  if (WEXITSTATUS(wait_status) == 5) GTEST_SKIP() << "64 threads started under the cap";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
#endif
}

}  // namespace
}  // namespace cleave
