// jemalloc (the executables' allocator) when memory runs out with threads yet to allocate: a thread
// whose first allocation finds no memory for its arena crashes jemalloc (SIGSEGV, jemalloc issue
// 2289), unless tools/allocator_tuning.h's createAllocatorArenas made the arenas first; then the
// allocation fails and std::bad_alloc reaches the thread. Each case runs in a forked child whose
// address space is capped.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "tools/allocator_tuning.h"

namespace cleave::cli {
namespace {

// In a child, after createAllocatorArenas: 6 threads start and wait, the address space is capped and
// filled, then each thread allocates for the first time. Returns the child's wait status.
int exhaustThenAllocateOnNewThreads() {
  const pid_t child = fork();
  if (child != 0) {
    int status = 0;
    waitpid(child, &status, 0);
    return status;
  }
  createAllocatorArenas();
  std::atomic<bool> go{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      while (!go) std::this_thread::yield();
      try {
        std::vector<int> first(1000);
        first[0] = 1;
      } catch (const std::bad_alloc&) {
        ++failed;
      }
    });
  const rlim_t cap = rlim_t{512} << 20;
  const rlimit limit{cap, cap};
  if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
  std::vector<void*> held;
  held.reserve(1 << 16);
  while (held.size() < held.capacity()) {
    void* block = std::malloc(64 << 10);
    if (block == nullptr) break;
    held.push_back(block);
  }
  if (held.size() == held.capacity()) _exit(3);  // the cap did not bind
  go = true;
  for (std::thread& thread : threads) thread.join();
  _exit(0);
}

// Without createAllocatorArenas, the same child dies by SIGSEGV on Debian 12's jemalloc 5.3 (checked
// when this was written: 3 runs of 3).
TEST(AllocatorArenas, ThreadsMadeAfterMemoryRanOutFailTheirAllocationsInsteadOfCrashing) {
  const int status = exhaustThenAllocateOnNewThreads();
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace cleave::cli
