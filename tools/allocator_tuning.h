// How the executables' allocator (jemalloc, tools/CMakeLists.txt) treats freed memory and threads.
#pragma once

namespace cleave::cli {

// For a short-lived process that makes and frees many large graphs (compile): freed pages stay
// with the allocator for reuse instead of going back to the kernel, which would zero them again on
// the next touch. GPT-3's --strategy auto compile: 8.0-8.6 s against 8.7-9.3 s back to back, 1.9 GB
// peak against 1.7 GB (the 100,000-node --dp 2 compile gains nothing). Does nothing where the
// process has another allocator (sanitizer builds).
void keepFreedMemoryForReuse();

// jemalloc makes an arena the first time a thread allocates, and where making it finds no memory
// it crashes (SIGSEGV; jemalloc issue 2289) instead of failing the allocation: a compile that ran
// out of memory with threads still to start crashed so (tests/e2e/cli.sh). Making every automatic
// arena here, on the main thread at start, leaves later threads to fail with std::bad_alloc, which
// cleave reports (exit 3). Does nothing without jemalloc.
void createAllocatorArenas();

}  // namespace cleave::cli
