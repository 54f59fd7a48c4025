// runParallelTasks: a shared counter hands out task numbers to a few threads.
#include "ir/parallel_tasks.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace cleave {

namespace {
// True on the threads of a runParallelTasks: tasks they start run on the thread itself, so nested
// parallel work does not start more threads than the host has.
thread_local bool t_in_parallel_task = false;
}  // namespace

Status runParallelTasks(size_t count, const std::function<Status(size_t)>& task) {
  const size_t threads = t_in_parallel_task ? 1 : std::min<size_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) CLEAVE_TRY(task(i));
    return Status::ok();
  }
  std::vector<Status> results(count, Status::ok());
  std::vector<std::exception_ptr> thrown(count);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    t_in_parallel_task = true;
    for (size_t i = next++; i < count; i = next++) {
      if (failed) return;  // a task failed: the compile stops, the rest need not run
      try {
        results[i] = task(i);
      } catch (...) {
        thrown[i] = std::current_exception();
      }
      if (!results[i].isOk() || thrown[i]) failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had (memory or the process's thread limit): fewer threads do the tasks
    }
  }
  work();
  t_in_parallel_task = false;
  for (std::thread& thread : pool) thread.join();
  for (size_t i = 0; i < count; ++i) {
    if (thrown[i]) std::rethrow_exception(thrown[i]);
    if (!results[i].isOk()) return results[i];
  }
  return Status::ok();
}

}  // namespace cleave
